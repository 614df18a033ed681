"""Ray's ``JobConfig``: what ``init(job_config=...)`` says of the whole
job."""


class JobConfig:
    """Settings of a driver's job.

    ``code_search_path``: folders the job's workers import its code from
    (put on their ``sys.path``, after the driver's own folders);
    ``runtime_env``: the job's runtime environment (as ``init(runtime_env=
    )``); ``ray_namespace``: its namespace (as ``init(namespace=)``);
    ``metadata``: kept for the caller. Options Shoal does not honour are
    refused: Java workers' ``jvm_options``, and a ``default_actor_lifetime``
    other than "non_detached" (give ``lifetime="detached"`` to each actor).
    """

    def __init__(self, jvm_options=None, code_search_path=None,
                 runtime_env=None, client_job=None, metadata=None,
                 ray_namespace=None, default_actor_lifetime="non_detached",
                 _py_driver_sys_path=None):
        if jvm_options:
            raise ValueError("jvm_options: Shoal has no Java workers")
        if isinstance(code_search_path, str):
            code_search_path = [code_search_path]
        self.code_search_path = list(code_search_path or [])
        self.runtime_env = runtime_env
        self.client_job = client_job
        self.metadata = dict(metadata or {})
        self.ray_namespace = ray_namespace
        if default_actor_lifetime != "non_detached":
            raise ValueError(
                'default_actor_lifetime: only "non_detached" in Shoal; give '
                'lifetime="detached" to the actors that outlive the job')
        self.default_actor_lifetime = default_actor_lifetime
        self._py_driver_sys_path = list(_py_driver_sys_path or [])

    def set_metadata(self, key, value):
        self.metadata[key] = value

    def set_runtime_env(self, runtime_env, validate=False):
        self.runtime_env = runtime_env

    def set_ray_namespace(self, ray_namespace):
        self.ray_namespace = ray_namespace
