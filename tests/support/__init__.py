"""What the tests (and benchmarks that start servers) share: real server processes."""
