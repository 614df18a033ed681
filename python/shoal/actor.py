"""``shoal.actor``: actor classes, handles and ``exit_actor()``, under the
names Ray's ``ray.actor`` gives them."""

from shoal._remote import ActorClass, ActorHandle, ActorMethod
from shoal.exceptions import AsyncioActorExit

__all__ = ["ActorClass", "ActorHandle", "ActorMethod", "exit_actor"]


def exit_actor():
    """Ends the actor this is called in, for good (it is not restarted).

    In a method, the call stops here: the rest of the method does not run,
    the caller's ``get()`` raises ActorDiedError saying the actor exited,
    and so do later calls. The actor's ``__ray_shutdown__`` and the
    process's atexit handlers run first. In an async actor it raises
    AsyncioActorExit, in a sync one SystemExit; catching either does not
    keep the actor alive. Called in ``__init__`` or in a coroutine the actor
    started, the actor ends as soon as no call is running.

    TypeError outside an actor (a driver, a task).
    """
    from shoal import _worker
    runtime = _worker.current_runtime()
    if runtime is None or not runtime.holds_actor():
        raise TypeError("exit_actor API is called on a non-actor worker: "
                        "call it in a method of an actor (to end an actor "
                        "from outside, use shoal.kill(handle) or "
                        "handle.__ray_terminate__.remote())")
    runtime.request_exit()
    if runtime.is_async_actor():
        raise AsyncioActorExit("the actor called exit_actor()")
    raise SystemExit(0)
