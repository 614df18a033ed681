"""Ray's ``ray.experimental`` names that programs use: the cluster's
key-value store for users (``internal_kv``) and the shared queue under its
older name (``queue``, the same as ``shoal.util.queue``)."""
