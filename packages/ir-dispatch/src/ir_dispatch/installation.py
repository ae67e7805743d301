"""Which dispatcher ir-dispatch installed into ir-spec, and the guard against a half setup."""

import ir_spec


class _Installed:
    dispatcher: ir_spec.Dispatcher | None = None


def require_installed() -> None:
    """Raise `RuntimeError` if ir-spec's dispatcher is no longer ir-dispatch's.

    Priorities set while another dispatcher is installed would silently have no effect on eager
    calls; this makes that mistake loud instead.
    """
    current = ir_spec.get_dispatcher()
    if _Installed.dispatcher is None or current is not _Installed.dispatcher:
        raise RuntimeError(
            f"ir_dispatch is not ir_spec's dispatcher (found {current!r}); call "
            "ir_dispatch.install() to reinstall it"
        )
