"""The wire between a learner and its actors: authenticated sockets, worker to worker, never through a scheduler.

The learner opens a `multiprocessing.connection.Listener` on its own host (port 0: the OS picks a free one)
with an authkey of 32 random bytes; only a peer that proves it holds the key (an HMAC challenge in both
directions, done by `multiprocessing.connection`) is accepted, because a message is unpickled on arrival.
Actors connect with `connect_to_learner`, retrying until the listener is up.

Messages are pickles of plain Python and numpy (never torch tensors, whose pickling shares memory through
file descriptors), framed by `send_bytes`/`recv_bytes`, so each side counts the bytes it moves:

- learner -> actor: `("weights", version, policy_state)` after every `weights_every` steps, `("stop",)` at the end,
  and, when the learner bounds the rollouts in flight (`actors.max_in_flight`), `("taken", n)`: it has taken n of
  this actor's rollouts out of its inbox so far (a running count, so a newer one replaces one not yet sent);
- actor -> learner: `("rollout", version, arrays, (returns, episodes))`, and `("error", message)` from an actor that
  raised, just before it hangs up.

`LearnerEndpoint` keeps two threads per actor: a receiver that puts rollouts into one bounded inbox (a full
inbox stops it reading, so TCP pushes back on actors that outpace the learner), and a sender that sends only
the newest weights waiting (a slow actor skips versions instead of queueing them). The learner's own thread
never touches a socket, so a stalled actor cannot stall it. An actor whose connection breaks is counted lost;
the learner goes on with the others.
"""

from __future__ import annotations

import os
import pickle
import queue
import secrets
import socket
import struct
import threading
import time
from dataclasses import dataclass
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client, Connection, Listener
from typing import Any

STOP = ("stop",)


def new_authkey() -> bytes:
    return secrets.token_bytes(32)


def dumps(message: Any) -> bytes:
    return pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)


@dataclass(frozen=True)
class Arrival:
    """One rollout as the learner's inbox holds it."""

    actor: int
    """Which connection it came on (numbered in the order actors joined)."""
    version: int
    """The behaviour policy version the actor acted with."""
    arrays: dict[str, Any]
    episodes: tuple[float, int]
    """Summed return and count of the episodes that ended in it."""
    nbytes: int


SOCKET_BUFFER_BYTES = 8 * 1024
"""The least kernel buffer for rollouts on each side of an actor's socket (Linux doubles what it is given); each
side sizes it to one of its rollouts where that is larger (`bound_socket_buffer`). Left to autotune, Linux grows
them to megabytes: hundreds of rollouts waiting in the kernel, past the learner's bounded inbox, all acted on
with weights that age while they wait. Bounded, a full inbox pushes back on the actor within a few rollouts."""


def bound_socket_buffer(conn: Connection, option: int, payload_bytes: int = 0) -> None:
    """Set `conn`'s socket option `option` (SO_SNDBUF or SO_RCVBUF) to one payload of `payload_bytes` (Linux doubles
    it: room for two), at least `SOCKET_BUFFER_BYTES`, which stops Linux autotuning it. Not smaller: a rollout
    larger than the buffers crawls through them (a 27 KB HalfCheetah rollout through 8 KiB ones: one actor sent
    660 transitions a second, and 9,600 with buffers of one rollout; docs/benchmarks.md)."""
    _set_socket_option(conn, option, max(SOCKET_BUFFER_BYTES, payload_bytes))


def bound_send_wait(conn: Connection, seconds: float) -> None:
    """Make a send on `conn` that cannot go on for `seconds` raise (SO_SNDTIMEO) instead of blocking for ever: an
    actor with no bound on its rollouts in flight otherwise waited in `send_bytes` to a stalled learner (its worker
    stopped, its socket open) once the buffers were full, holding its slot. The learner's inbox pushes back through
    the same buffers, so `seconds` is the longest a learner may take to take one rollout in."""
    whole = int(seconds)
    _set_socket_option(conn, socket.SO_SNDTIMEO, struct.pack("ll", whole, int((seconds - whole) * 1_000_000)))


def _set_socket_option(conn: Connection, option: int, value: int | bytes) -> None:
    """`setsockopt(SOL_SOCKET, option, value)` on `conn`'s socket, through a duplicate of its descriptor (a
    Connection has no socket object); nothing if it was closed meanwhile."""
    try:
        with socket.socket(fileno=os.dup(conn.fileno())) as sock:
            sock.setsockopt(socket.SOL_SOCKET, option, value)
    except OSError:  # closed meanwhile: nothing to set
        pass


class _Link:
    """One actor's connection: a receiver thread and a sender thread holding the newest payload to send."""

    def __init__(self, index: int, conn: Connection, endpoint: LearnerEndpoint, first: bytes) -> None:
        self.index, self.conn, self.endpoint = index, conn, endpoint
        self.pending: bytes | None = first
        self.taken = self.taken_sent = 0  # this actor's rollouts the learner took in; the count last sent to it
        self.stop_sent = False
        self.alive = True
        self.wake = threading.Condition()
        self.receiver = threading.Thread(target=self._receive, name=f"actor-link-{index}-recv", daemon=True)
        self.sender = threading.Thread(target=self._send, name=f"actor-link-{index}-send", daemon=True)
        self.receiver.start()
        self.sender.start()

    def offer(self, payload: bytes) -> None:
        """Send `payload` next, replacing whatever weights were still waiting."""
        with self.wake:
            self.pending = payload
            self.wake.notify()

    def acknowledge(self) -> None:
        """The learner took one more of this actor's rollouts in: tell it (the next `("taken", n)` sent)."""
        with self.wake:
            self.taken += 1
            self.wake.notify()

    def _send(self) -> None:
        while True:
            with self.wake:
                while self.pending is None and self.taken == self.taken_sent and self.alive:
                    self.wake.wait()
                if not self.alive:
                    return
                payloads = []
                if self.pending is not None:
                    payloads.append(self.pending)
                    self.pending = None
                if self.taken != self.taken_sent:  # after the weights: an actor it lets go acts with them
                    self.taken_sent = self.taken
                    payloads.append(dumps(("taken", self.taken)))
            for payload in payloads:
                try:
                    self.conn.send_bytes(payload)
                except OSError:  # the actor is gone: the receiver counts it
                    return
                if payload == self.endpoint.stop_payload:
                    return

    def _receive(self) -> None:
        endpoint = self.endpoint
        bounded = False
        try:
            while True:  # after `stopping`, still read (and drop) until the actor hangs up, so its send never blocks
                data = self.conn.recv_bytes()
                if not bounded:  # the kernel's receive buffer, sized by the first rollout
                    bound_socket_buffer(self.conn, socket.SO_RCVBUF, len(data))
                    bounded = True
                message = pickle.loads(data)
                if message[0] == "error":  # the actor raised: it hangs up next, and Dask will not run it again
                    endpoint.count_failed(message[1])
                    continue
                kind, version, arrays, episodes = message
                if kind != "rollout":
                    continue
                arrival = Arrival(self.index, int(version), arrays, episodes, len(data))
                while not endpoint.stopping.is_set():
                    try:
                        endpoint.inbox.put(arrival, timeout=0.2)
                        break
                    except queue.Full:
                        continue
        except (EOFError, OSError):
            if not endpoint.stopping.is_set():
                endpoint.count_lost()
        finally:
            with self.wake:
                self.alive = False
                self.wake.notify()

    def hang_up(self) -> None:
        """Shut the socket down, which wakes a thread blocked on it (closing its descriptor would not), then close."""
        try:
            with socket.socket(fileno=os.dup(self.conn.fileno())) as sock:
                sock.shutdown(socket.SHUT_RDWR)
        except OSError:  # already closed by the peer
            pass
        with self.wake:
            self.alive = False
            self.wake.notify()
        self.conn.close()


class LearnerEndpoint:
    """The learner's side: listens on `(host, port 0)`, accepts actors, receives rollouts, sends weights."""

    def __init__(self, host: str, authkey: bytes, inbox_size: int, first_weights: bytes) -> None:
        self.authkey = authkey
        self.listener = Listener((host, 0), authkey=authkey)
        self.address: tuple[str, int] = self.listener.address
        self.inbox: queue.Queue[Arrival] = queue.Queue(maxsize=inbox_size)
        self.stopping = threading.Event()
        self.stop_payload = dumps(STOP)
        self.weights = first_weights
        self.links: list[_Link] = []
        self.lock = threading.Lock()
        self.joined = self.lost = self.refused = 0
        self.failed = 0
        """Actors that raised (their env, their policy) and said so before hanging up: gone for good, as Dask does not
        rerun a task that raised."""
        self.last_error: str | None = None
        self.last_connected = self.last_joined = time.monotonic()
        self.acceptor = threading.Thread(target=self._accept, name="actor-link-accept", daemon=True)
        self.acceptor.start()

    def _accept(self) -> None:
        while not self.stopping.is_set():
            try:
                conn = self.listener.accept()
            except (OSError, EOFError, AuthenticationError):  # a peer without the key is turned away
                if self.stopping.is_set():
                    return
                with self.lock:
                    self.refused += 1
                continue
            if self.stopping.is_set():
                conn.close()
                return
            with self.lock:
                self.links.append(_Link(len(self.links), conn, self, self.weights))
                self.joined += 1
                self.last_joined = time.monotonic()

    def count_lost(self) -> None:
        with self.lock:
            self.lost += 1
            self.last_connected = time.monotonic()

    def count_failed(self, error: str) -> None:
        with self.lock:
            self.failed += 1
            self.last_error = error

    def connected(self) -> int:
        """Actors connected now."""
        with self.lock:
            live = sum(link.alive for link in self.links)
            if live:
                self.last_connected = time.monotonic()
            return live

    def acknowledge(self, actor: int) -> None:
        """The learner took a rollout of actor `actor` (an `Arrival.actor`) out of the inbox."""
        with self.lock:
            link = self.links[actor]
        link.acknowledge()

    def publish(self, weights: bytes) -> None:
        """`weights` (a pickled `("weights", version, state)`) goes to every actor, and to every one joining."""
        self.weights = weights
        with self.lock:
            links = list(self.links)
        for link in links:
            link.offer(weights)

    def close(self, flush_seconds: float = 10.0) -> None:
        """Tell every actor to stop, wait up to `flush_seconds` for them to hang up (an actor reads the stop after
        its current rollout), then stop listening and close every connection."""
        self.stopping.set()
        with self.lock:
            links = list(self.links)
        for link in links:
            link.offer(self.stop_payload)
        try:  # wake the acceptor blocked in accept(): closing a listening socket does not, on Linux
            Client(self.address, authkey=self.authkey).close()
        except OSError:
            pass
        deadline = time.monotonic() + flush_seconds
        for link in links:
            link.receiver.join(max(0.0, deadline - time.monotonic()))
        self.acceptor.join(max(0.0, deadline - time.monotonic()))
        self.listener.close()
        for link in links:
            link.hang_up()


def connect_to_learner(address: tuple[str, int], authkey: bytes, timeout: float) -> Connection:
    """An actor's connection to its learner, retried until `timeout` seconds (the learner may still be starting)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return Client(tuple(address), authkey=authkey)
        except ConnectionRefusedError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.2)
