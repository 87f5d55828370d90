"""One exception tree for the collectors; transport errors are translated into it in one place, the HTTP
edge's ``collectors.http.failures.translate`` (a request to a server as the failure's own class below; a
PromQL query's as ``QueryError``)."""


class CollectorError(Exception):
    """Base of everything the collectors raise on purpose."""


class ScrapeError(CollectorError):
    """A target could not be scraped; ``str(exc)`` is the per-target error shown to users."""


class Unreachable(ScrapeError):
    """Connection refused, reset, DNS failure."""


class ScrapeTimeout(ScrapeError):
    """No complete answer within scrape.timeout_s."""


class HTTPStatusError(ScrapeError):
    """The server answered with a non-2xx status (kept in ``status`` so callers can fall back on 404)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class BadExposition(ScrapeError):
    """The body is not Prometheus text / OpenMetrics (an HTML page, binary garbage, truncated)."""


class Oversize(ScrapeError):
    """The body exceeded scrape.max_body_bytes."""


class BadServerInfo(ScrapeError):
    """/server_info (and /get_server_info) did not return the expected JSON object."""


class QueryError(CollectorError):
    """A PromQL query failed (Prometheus source)."""


class StoreError(CollectorError):
    """The history store could not be opened, read or written (disk full, locked, corrupt)."""
