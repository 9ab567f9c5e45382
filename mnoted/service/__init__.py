"""The tool executor and the handlers of every ``mnote.*`` tool, one module per family."""

from mnoted.service import (
    artifacts,
    doc_tools,
    file_tools,
    link_tools,
    page_tools,
    review,
    router,
    search_tools,
)
from mnoted.service.actors import Actor
from mnoted.service.calls import HANDLERS
from mnoted.service.executor import Service

__all__ = [
    "HANDLERS",
    "Actor",
    "Service",
    "artifacts",
    "doc_tools",
    "file_tools",
    "link_tools",
    "page_tools",
    "review",
    "router",
    "search_tools",
]
