"""What scripts/check-dockerfile.py and scripts/check-k8s.py share: a check that prints its
verdict and keeps the failures (scripts/check-deploy reads the exit status)."""

failures = []


def check(ok, what):
    """Records `what` as checked, or as a failure."""
    print(("ok: " if ok else "FAILED: ") + what)
    if not ok:
        failures.append(what)
    return ok
