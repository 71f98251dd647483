"""The host's transports: the listeners, the connections on asyncio's transports and on the host's own epoll, WebSockets, TLS; they report to server.py through events.py."""
