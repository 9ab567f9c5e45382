"""The pure core: Markdown pages, block ids, block commands and views. No I/O."""
