from typing import TYPE_CHECKING

from trajforge.registry import lazy_names

if TYPE_CHECKING:
    from trajforge.report.html import REPORT_FILE, RESULTS_FILE, build_report
    from trajforge.report.links import view_command

__all__ = [
    "REPORT_FILE",
    "RESULTS_FILE",
    "build_report",
    "view_command",
]

# Loaded on first access (PEP 562): importing the package stays as light as it was; the
# TYPE_CHECKING imports above give mypy the names' types.
__getattr__ = lazy_names(
    __name__,
    {
        "REPORT_FILE": "html",
        "RESULTS_FILE": "html",
        "build_report": "html",
        "view_command": "links",
    },
)
