"""Ray's ``ray.runtime_env``: RuntimeEnv, a task's or actor's runtime
environment (env_vars, working_dir, py_modules), given as
``runtime_env=`` to ``@shoal.remote`` or ``.options()``."""


class RuntimeEnv(dict):
    """A runtime_env as a dict: ``RuntimeEnv(env_vars={"A": "1"},
    working_dir="./src")``. Fields Shoal cannot honour (pip, conda,
    container) are refused when a task or actor is submitted with it."""

    def __init__(self, *, env_vars=None, working_dir=None, py_modules=None,
                 **fields):
        super().__init__(**fields)
        if env_vars is not None:
            self["env_vars"] = env_vars
        if working_dir is not None:
            self["working_dir"] = working_dir
        if py_modules is not None:
            self["py_modules"] = py_modules

    def to_dict(self):
        return dict(self)
