"""Arrivals continue ready conversations first, else start new ones, turn by turn."""

from bench.harness.session_pool import SessionPool
from bench.harness.workloads import Session, Turn


def _session(i: int, turns: int = 2, think: float = 1.0) -> Session:
    return Session(id=f"s{i}", system="sys",
                   turns=[Turn(f"q{i}.{t}", think_s=0.0 if t == 0 else think) for t in range(turns)])


def test_arrivals_start_new_sessions_until_one_is_ready():
    pool = SessionPool([_session(0), _session(1), _session(2)])
    a = pool.take(0.0)
    turn, messages = a.start_turn()
    assert turn == 0 and messages == [{"role": "system", "content": "sys"},
                                      {"role": "user", "content": "q0.0"}]
    assert a.headers == {"x-session-id": "s0"}
    a.finish_turn("a0")
    pool.release(a, now=0.5, ok=True)  # ready again at 1.5 (think time)
    b = pool.take(1.0)
    assert b.session.id == "s1"  # s0 is still thinking
    c = pool.take(1.6)
    assert c is a
    turn, messages = c.start_turn()
    assert turn == 1 and [m["content"] for m in messages] == ["sys", "q0.0", "a0", "q0.1"]
    assert pool.started == 2


def test_finished_or_failed_sessions_do_not_come_back():
    pool = SessionPool([_session(0, turns=1), _session(1), _session(2)])
    a = pool.take(0.0)
    a.start_turn()
    a.finish_turn("x")
    pool.release(a, now=0.1, ok=True)
    assert a.finished and pool.waiting() == 0
    b = pool.take(0.2)
    b.start_turn()
    pool.release(b, now=0.3, ok=False)
    assert pool.waiting() == 0
    assert pool.take(5.0).session.id == "s2"
    assert pool.take(5.0) is None


def test_the_longest_ready_session_goes_first_and_single_turns_send_no_session_id():
    pool = SessionPool([_session(i, turns=3, think=0.0) for i in range(3)])
    first, second = pool.take(0), pool.take(0)
    for s, end in ((second, 1.0), (first, 2.0)):
        s.start_turn()
        s.finish_turn("ok")
        pool.release(s, now=end, ok=True)
    assert pool.take(3.0) is second and pool.take(3.0) is first
    single = SessionPool([Session(id="u", system=None, turns=[Turn("hi")])]).take(0)
    assert single.headers == {} and single.start_turn()[1] == [{"role": "user", "content": "hi"}]
