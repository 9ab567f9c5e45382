"""Replication with Git remotes: fetch and push through the user's ``git``, merges that
keep every version (the page merge itself is pure, in :mod:`mnoted.core.merge`).

| module | holds |
| --- | --- |
| ``git.py`` | ``git`` in a process: fetch, push, remotes; secrets redacted |
| ``merging.py`` | the merge commit of a fetched head into HEAD (pygit2 objects only) |
| ``sync.py`` | ``RemoteSync``: the per-workspace loop, its state and status |
| ``host.py`` | wiring into a daemon's workspace runner (writer thread, reviews, events) |
"""
