"""The daemon's transport: an aiohttp app on a private Unix socket, and the event stream."""
