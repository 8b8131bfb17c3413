"""What the benchmarks share: the load generator and its workloads, run statistics, rate
sweeps, the comparison targets and goals, and the Markdown/HTML reports."""
