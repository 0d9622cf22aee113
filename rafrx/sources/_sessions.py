"""The ``aiohttp.ClientSession`` of a client on each event loop, and the calls on them."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Mapping
from typing import TYPE_CHECKING, Any

import aiohttp
from aiohttp.helpers import basicauth_from_netrc, get_env_proxy_for_url, netrc_from_env
from yarl import URL

from rafrx._redaction import (
    header_secrets,
    login_secrets,
    netrc_secrets,
    proxy_secrets,
    url_secrets,
)

if TYPE_CHECKING:
    from rafrx.sources._http import _StreamCall

__all__ = ["SessionPool", "has_authorization", "sends_netrc_login", "session_proxy"]


async def _keep_open(session: aiohttp.ClientSession) -> AsyncGenerator[None, None]:
    """Closes ``session`` when the loop shuts its async generators down
    (``asyncio.run`` does), if :meth:`SessionPool.aclose` did not."""
    try:
        yield
    finally:
        await session.close()


class SessionPool:
    """The ``aiohttp.ClientSession`` a client uses, one per event loop, and the
    calls running on them.

    A session given by the user is used as is (its own ``trust_env`` applies)
    and never closed. Otherwise one is created lazily on the running loop, with
    no connection limit (1000 concurrent streams need 1000 connections), closed
    by :meth:`aclose`, or when ``asyncio.run`` ends the loop.

    The pool's own sessions never read the environment themselves: with
    ``trust_env``, :meth:`from_environment` gives each request what aiohttp's
    ``trust_env`` would, except a ``.netrc`` login beside an ``Authorization``
    header (which aiohttp refuses, failing every request): the header wins, as
    in httpx.
    """

    def __init__(
        self, session: aiohttp.ClientSession | None = None, *, trust_env: bool = False
    ) -> None:
        self._given = session
        self._trust_env = trust_env
        self._owned: dict[asyncio.AbstractEventLoop, tuple[aiohttp.ClientSession, Any]] = {}
        self._calls: set[_StreamCall] = set()

    @property
    def trust_env(self) -> bool:
        """Whether requests go through the environment's proxies (``HTTPS_PROXY`` …):
        the given session's setting, else the pool's."""
        return self._given.trust_env if self._given is not None else self._trust_env

    def added_secrets(self, url: URL, headers: Mapping[str, str]) -> tuple[str, ...]:
        """The credentials a request to ``url`` with ``headers`` goes with beside its
        own, which an error page (a proxy's, a gateway's) may echo: those a given
        session sends (see :func:`_given_session_secrets`); with ``trust_env``, the
        environment proxies' and the API host's ``.netrc`` login, unless an
        ``Authorization`` (or credentials in ``url``) wins over it."""
        secrets = _given_session_secrets(self._given) if self._given is not None else ()
        if self.trust_env:
            secrets = (*secrets, *proxy_secrets())
            if sends_netrc_login(url, headers):
                secrets = (*secrets, *netrc_secrets(url.host))
        return secrets

    async def from_environment(
        self, url: URL, headers: Mapping[str, str]
    ) -> tuple[URL | None, dict[str, str]]:
        """The proxy for a request to ``url`` and its ``headers``, with what the
        environment adds when the pool's own sessions trust it (see
        :func:`_environment_for`); else no proxy (a given session's own) and
        ``headers`` as they are."""
        if self._given is not None or not self._trust_env:
            return None, dict(headers)
        return await asyncio.to_thread(_environment_for, url, headers)

    async def get(self) -> aiohttp.ClientSession:
        """The session for the running loop."""
        if self._given is not None:
            return self._given
        loop = asyncio.get_running_loop()
        owned = self._owned.get(loop)
        if owned is not None and not owned[0].closed:
            return owned[0]
        for other in list(self._owned):  # (a snapshot: threads with loops of their own share it)
            if other.is_closed():
                self._owned.pop(other, None)
        session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0),
            timeout=aiohttp.ClientTimeout(total=None),
            trust_env=False,  # (the environment's settings come from from_environment)
        )
        keeper = _keep_open(session)
        self._owned[loop] = (session, keeper)
        await keeper.__anext__()  # registers it with the loop's async-generator hooks
        return session

    def track(self, call: _StreamCall, task: asyncio.Task[None]) -> None:
        """Count ``call`` as running until ``task`` is done."""
        self._calls.add(call)
        task.add_done_callback(lambda _: self._calls.discard(call))

    async def aclose(self) -> None:
        """End the calls still running, then close the sessions this pool created.

        Each running call ends at once with a non-retryable
        :class:`~rafrx.errors.TransportError` (after what it already
        delivered), its response closed and, on this loop, its task awaited.
        Calls started afterwards work as before, on new sessions. A session
        of another thread's loop is closed on that loop; if that loop is not
        running (or stops first), it is closed when that loop runs again
        (``asyncio.run`` ending it does).
        """
        current = asyncio.get_running_loop()
        calls = list(self._calls)
        for call in calls:
            call.abort()
        tasks = [call.task for call in calls if call.loop is current and call.task is not None]
        tasks = [task for task in tasks if task is not asyncio.current_task()]
        if tasks:
            await asyncio.wait(tasks)
        owned, self._owned = self._owned, {}
        for loop, (_, keeper) in owned.items():
            if loop is current:
                await keeper.aclose()
            elif not loop.is_closed():  # (a loop not running closes it when it runs again)
                future = asyncio.run_coroutine_threadsafe(keeper.aclose(), loop)
                closed = asyncio.wrap_future(future)
                while not closed.done() and loop.is_running():  # (it may stop before it)
                    await asyncio.wait({closed}, timeout=0.1)


def _environment_for(url: URL, headers: Mapping[str, str]) -> tuple[URL | None, dict[str, str]]:
    """What aiohttp's ``trust_env`` takes from the environment for a request to
    ``url`` (blocking: it reads ``.netrc``): the proxy, with its credentials in
    its URL (see :func:`_env_proxy`), and ``headers`` with the ``.netrc`` login
    of ``url``'s host as Basic ``Authorization`` unless they hold one or ``url``
    has credentials of its own (which aiohttp sends)."""
    headers = dict(headers)
    if sends_netrc_login(url, headers):
        login = _netrc_login(url.host)
        if login is not None:
            headers["Authorization"] = login
    return _env_proxy(url), headers


def sends_netrc_login(url: URL, headers: Mapping[str, str]) -> bool:
    """Whether a request to ``url`` with ``headers`` goes, with ``trust_env``, with
    its host's ``.netrc`` login (if it has one): neither ``url`` has credentials
    nor ``headers`` an ``Authorization``."""
    has_credentials = url.raw_user is not None or url.raw_password is not None
    return not has_credentials and not has_authorization(headers)


def has_authorization(headers: Mapping[str, str]) -> bool:
    """Whether ``headers`` hold an ``Authorization`` (in any case)."""
    return any(name.lower() == "authorization" for name in headers)


def session_proxy(session: aiohttp.ClientSession | None) -> URL | None:
    """The proxy a ``ClientSession(proxy=...)`` sends every request through (aiohttp has
    no public accessor), or ``None``."""
    proxy: URL | str | None = getattr(session, "_default_proxy", None)
    with contextlib.suppress(ValueError):  # (not a URL: aiohttp refuses it when sending)
        return None if proxy is None else URL(proxy)
    return None


def _given_session_secrets(session: aiohttp.ClientSession) -> tuple[str, ...]:
    """The credentials a given ``session`` sends with every request: its default
    ``headers=``' (those of credential headers, as the client's ``headers=``: see
    :func:`~rafrx._redaction.header_secrets`), its ``auth=`` login, and those it sends
    its ``proxy=`` (see :func:`_given_proxy_secrets`)."""
    auth = session.auth
    login = login_secrets(auth.login, auth.password) if auth is not None else ()
    return (*header_secrets(session.headers), *login, *_given_proxy_secrets(session))


def _given_proxy_secrets(session: aiohttp.ClientSession) -> tuple[str, ...]:
    """The credentials a given ``session`` sends its ``proxy=`` as ``Proxy-Authorization``:
    those in the proxy's URL, or its ``proxy_auth=``."""
    proxy = session_proxy(session)
    if proxy is None:  # (no proxy: no proxy_auth sent)
        return ()
    auth = getattr(session, "_default_proxy_auth", None)
    if isinstance(auth, aiohttp.BasicAuth):
        return (*url_secrets(proxy), *login_secrets(auth.login, auth.password))
    return url_secrets(proxy)


def _netrc_login(host: str | None) -> str | None:
    """The ``.netrc`` (``$NETRC``, else ``~/.netrc``) login of ``host`` as aiohttp
    sends it (``Basic …``), or ``None``."""
    if host is None:
        return None
    try:
        return basicauth_from_netrc(netrc_from_env(), host).encode()
    except LookupError:  # (no file, or no entry for the host)
        return None


def _env_proxy(url: URL) -> URL | None:
    """The proxy ``HTTP_PROXY`` / ``HTTPS_PROXY`` name for ``url`` unless
    ``NO_PROXY`` lists its host, or ``None``; with the credentials aiohttp sends
    it (the proxy URL's own, else its host's ``.netrc`` login) in its URL, from
    where aiohttp sends them as ``Proxy-Authorization``."""
    try:
        proxy, auth = get_env_proxy_for_url(url)
    except LookupError:
        return None
    if auth is None:
        return proxy
    return proxy.with_user(auth.login).with_password(auth.password)
