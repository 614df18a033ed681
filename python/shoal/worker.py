"""``python -m shoal.worker``: a worker process that a node agent starts
for a Python job (see shoal._worker)."""

if __name__ == "__main__":
    from shoal._worker import main

    main()
