"""The branch and the commit it names, as the store last saw them, and catching up with Git.

:class:`Heads` owns the workspace's view of HEAD: the branch, its commit (which the landing
moves forward as it commits) and the stat stamp of the refs when they were last read. Someone
else's ``git commit``, ``pull`` or ``checkout`` is noticed by :meth:`Heads.refresh`, which
re-indexes the sidecar to the new head. It depends on the repository and the sidecar only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pygit2

from mnoted.store import indexer, refs
from mnoted.store.sidecar import Sidecar

log = logging.getLogger("mnoted.store")


class Heads:
    """The branch, its commit and the refs' stamp; caught up by :meth:`refresh`."""

    def __init__(
        self,
        gitdir: Path,
        repo: pygit2.Repository,
        side: Sidecar,
        committer_email: str,
        frozen: Callable[[], bool],
    ) -> None:
        """``frozen`` tells when HEAD must not be read again: commits of a group are pending
        on the head read when it began (the group's compare-and-swap catches a move)."""
        self.gitdir = gitdir
        self._repo = repo
        self._side = side
        self._committer_email = committer_email
        self._frozen = frozen
        self.branch = refs.current_branch(gitdir)
        self.head: str | None = refs.read_ref(gitdir, self.branch)
        self.ref_stamp: object = None  # refs.stamp when HEAD was last read

    def refresh(self) -> bool:
        """Notice a HEAD moved by someone else (``git commit/pull/checkout``); re-index.

        Returns True if HEAD had moved since the store last looked.
        """
        if self._frozen():
            # Pending commits sit on the group's base; if someone moves the branch meanwhile
            # the group's compare-and-swap fails and its commands run again.
            return False
        stamp = refs.stamp(self.gitdir, self.branch)
        if stamp == self.ref_stamp:
            return False
        # Kept only once HEAD reads as a branch: a detached HEAD is refused on every call
        # until a branch is back (a stamp kept for it would let the next call see nothing
        # new and commit on the old branch under a HEAD that is not on it).
        branch = refs.current_branch(self.gitdir)
        head = refs.read_ref(self.gitdir, branch)
        self.ref_stamp = stamp  # taken before reading: a change after it is seen next time
        moved = branch != self.branch or head != self.head
        if moved and branch == self.branch and self.head is not None:
            self._keep_if_rewound(self.head, head)
        self.branch, self.head = branch, head
        indexer.advance(self._repo, self._side, head, branch)
        return moved

    def _keep_if_rewound(self, old: str, new: str | None) -> None:
        """Keep mnoted's commits reachable when someone moves the branch back over them.

        A ``git reset``, or a ``git pull`` whose merge fails and restores the commit it
        started from, can move the branch back over commits mnoted made (and acknowledged)
        in the meantime. mnoted does not move it forward again (the person may have meant
        it), but it keeps them under ``refs/mnote/rewound/<commit>`` so no acknowledged
        commit becomes unreachable; ``git log --all`` shows them.
        """
        if new is not None and self._repo.descendant_of(pygit2.Oid(hex=new), pygit2.Oid(hex=old)):
            return
        stop = None
        if new is not None:
            base = self._repo.merge_base(pygit2.Oid(hex=old), pygit2.Oid(hex=new))
            stop = str(base) if base is not None else None
        commit: pygit2.Commit | None = self._repo[old]  # type: ignore[assignment]
        for _ in range(10_000):
            if commit is None or str(commit.id) == stop:
                return
            if commit.committer.email == self._committer_email:
                self._repo.references.create(f"refs/mnote/rewound/{old}", old, force=True)
                log.warning(
                    "%s moved back from %s to %s over commits of mnoted; they are kept "
                    "under refs/mnote/rewound/%s",
                    self.branch,
                    old[:12],
                    (new or "nothing")[:12],
                    old,
                )
                return
            commit = commit.parents[0] if commit.parents else None
