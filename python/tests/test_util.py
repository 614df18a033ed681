"""shoal.util's ActorPool and Queue on a real cluster: results in order and
as they finish, idle actors, and a queue shared with tasks that blocks,
times out and refuses batches that do not fit."""

import pytest

import shoal
from shoal.util import ActorPool
from shoal.util.queue import Empty, Full, Queue


@shoal.remote(num_cpus=0)
class Doubler:
    def double(self, v):
        return 2 * v


def test_actor_pool(connected):
    a, b = Doubler.remote(), Doubler.remote()
    pool = ActorPool([a, b])
    assert list(pool.map(lambda x, v: x.double.remote(v), range(5))) == [
        0, 2, 4, 6, 8]
    assert sorted(pool.map_unordered(lambda x, v: x.double.remote(v),
                                     range(5))) == [0, 2, 4, 6, 8]
    for v in range(3):
        pool.submit(lambda x, v: x.double.remote(v), v)
    assert not pool.has_free()
    assert [pool.get_next() for _ in range(3)] == [0, 2, 4]
    assert not pool.has_next()
    with pytest.raises(StopIteration):
        pool.get_next()
    idle = pool.pop_idle()
    assert idle in (a, b)
    with pytest.raises(ValueError, match="already belongs"):
        pool.push(a if idle is b else b)
    pool.push(idle)
    assert pool.has_free()


@shoal.remote
def produce(queue, n):
    for i in range(n):
        queue.put(i)
    return n


def test_queue(connected):
    q = Queue(maxsize=2)
    assert q.empty() and q.size() == 0
    q.put(1)
    q.put_nowait(2)
    assert q.full() and len(q) == 2
    with pytest.raises(Full):
        q.put(3, timeout=0.2)
    with pytest.raises(Full):
        q.put_nowait(3)
    assert q.get() == 1 and q.get_nowait() == 2
    with pytest.raises(Empty):
        q.get(timeout=0.2)
    with pytest.raises(Empty):
        q.get_nowait()
    with pytest.raises(Full):
        q.put_nowait_batch([1, 2, 3])
    q.put_nowait_batch([5, 6])
    with pytest.raises(Empty):
        q.get_nowait_batch(3)
    assert q.get_nowait_batch(2) == [5, 6]
    with pytest.raises(ValueError):
        q.get(timeout=-1)

    done = produce.remote(q, 5)  # blocks on the full queue as it goes
    assert [q.get(timeout=30) for _ in range(5)] == list(range(5))
    assert shoal.get(done) == 5
    q.shutdown()
