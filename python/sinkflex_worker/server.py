"""The worker's socket server: accepts connections on a Unix socket or TCP, checks the token, reads frames
(frames.py), runs each op on the engine (engine.py) in arrival order and answers with one frame per
request. Sessions belong to the connection that opened them and are freed when it closes; the model,
optimizer and policy version are shared. One op runs at a time (a global lock). Under torchrun (FSDP2,
distributed.py) this is rank 0: each op after hello is broadcast to the other ranks before it runs.

It does not know losses or the TypeScript side's types; python/README.md is the protocol.
"""
from __future__ import annotations

import hmac
import ipaddress
import os
import socket
import sys
import threading
import time
import traceback
from typing import Dict, List, Optional

import numpy as np

from .engine import EngineError, SequenceMasks, Session, TorchEngine
from .frames import PROTOCOL_VERSION, FrameError, encode_frame, read_frame


class RequestError(Exception):
    """A malformed request (missing field, wrong type)."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _split(flat: np.ndarray, lengths: np.ndarray, what: str) -> List[np.ndarray]:
    if int(lengths.sum()) != flat.shape[0] or (lengths < 0).any():
        raise RequestError(f"{what}: the lengths add up to {int(lengths.sum())} but {flat.shape[0]} values came")
    out, off = [], 0
    for n in lengths.tolist():
        out.append(flat[off: off + n])
        off += n
    return out


class Connection:
    def __init__(self, server: "WorkerServer", sock: socket.socket):
        self.server = server
        self.sock = sock
        self.sessions: Dict[int, Session] = {}
        self.authed = server.token is None

    def session(self, h: dict) -> Session:
        sid = h.get("sid")
        s = self.sessions.get(sid)
        if s is None:
            raise EngineError(f"session {sid} is not open on this connection (closed, or never opened)")
        return s

    def serve(self) -> None:
        try:
            while True:
                frame = read_frame(self.sock)
                if frame is None:
                    return
                header, arrays = frame
                rid = header.get("id")
                t0 = time.perf_counter()
                try:
                    with self.server.lock:
                        if self.server.dist is not None and header.get("op") != "hello" and self.authed:
                            self.server.dist.broadcast(("op", id(self), header, arrays))
                        reply, out = self.dispatch(header, arrays)
                    reply = dict(reply, id=rid, ok=True)
                except (EngineError, RequestError, ValueError) as e:
                    reply, out = {"id": rid, "ok": False, "error": str(e), "kind": "request"}, None
                except Exception as e:  # a bug or a device failure: the message and where
                    tb = traceback.format_exc(limit=4)
                    sys.stderr.write(tb)
                    reply, out = {"id": rid, "ok": False, "error": f"{type(e).__name__}: {e}", "kind": "internal"}, None
                reply["ms"] = (time.perf_counter() - t0) * 1000  # the op's time in the worker (lock wait included)
                self.sock.sendall(encode_frame(reply, out))
                if header.get("op") == "hello" and not self.authed:
                    return
                if header.get("op") == "shutdown" and reply.get("ok"):
                    self.server.stop()
                    return
        except (FrameError, ConnectionError, OSError) as e:
            sys.stderr.write(f"sinkflex_worker: connection dropped: {e}\n")
        finally:
            self.sessions.clear()
            with self.server.lock:
                if self.server.dist is not None:
                    self.server.dist.broadcast(("close", id(self)))
                self.server.engine.release()
            try:
                self.sock.close()
            except OSError:
                pass

    def dispatch(self, h: dict, a: Dict[str, np.ndarray]):
        op = h.get("op")
        eng = self.server.engine
        if op == "hello":
            if self.server.token is not None:
                given = h.get("token")
                if not (isinstance(given, str) and hmac.compare_digest(given.encode(), self.server.token.encode())):
                    raise RequestError("hello: wrong or missing token; pass the worker's token (SINKFLEX_WORKER_TOKEN)")
            self.authed = True
            import torch
            import transformers

            return {"protocol": PROTOCOL_VERSION, "pid": os.getpid(), "torch": torch.__version__,
                    "transformers": transformers.__version__, "device": str(eng.device)}, None
        if not self.authed:
            raise RequestError("the first request must be hello with the worker's token")
        if op == "load":
            info = eng.load(_str(h, "dir"))
            for s in self.sessions.values():  # caches of the old weights: recomputed on next use
                s.drop_cache()
            return info, None
        if op == "enable_lora":
            info = eng.enable_lora({"rank": h.get("rank"), "alpha": h.get("alpha"), "targets": h.get("targets")})
            for s in self.sessions.values():  # the adapter changes nothing at first, but the model object is new
                s.drop_cache()
            return info, None
        if op == "save":
            eng.save(_str(h, "dir"), optimizer=bool(h.get("optimizer", False)))
            return {}, None
        if op == "state":
            return {"policyVersion": eng.policy_version, "sessions": len(self.sessions), "vocabSize": eng.vocab_size}, None
        if op == "open":
            sid = _int(h, "sid")
            if sid in self.sessions:
                raise RequestError(f"open: session {sid} is already open")
            toks = a.get("tokens", np.zeros(0, np.int32)).tolist()
            eng.check_ids(toks, "open")
            self.sessions[sid] = Session(tokens=toks)
            return {}, None
        if op == "append":
            s = self.session(h)
            pinned = a["pinned"].tolist() if "pinned" in a else None
            eng.append(s, a.get("tokens", np.zeros(0, np.int32)).tolist(), pinned)
            return {}, None
        if op == "fork":
            s = self.session(h)
            child = _int(h, "child")
            if child in self.sessions:
                raise RequestError(f"fork: session {child} is already open")
            self.sessions[child] = eng.fork(s)
            return {}, None
        if op == "truncate":
            n = _int(h, "n")
            if n < 0:
                raise RequestError(f"truncate: n must be >= 0 (got {n})")
            eng.truncate(self.session(h), n)
            return {}, None
        if op == "kv":
            return eng.kv_state(self.session(h)), None
        if op == "close":
            self.sessions.pop(h.get("sid"), None)
            return {}, None
        if op == "sample":
            sids, params = h.get("sids"), h.get("params")
            if not (isinstance(sids, list) and isinstance(params, list) and len(sids) == len(params)):
                raise RequestError("sample: sids and params must be lists of the same length")
            stops = _split(a.get("stop", np.zeros(0, np.int32)), np.array([int(p.get("stopCount", 0)) for p in params]), "sample stop")
            sessions = [self.session({"sid": sid}) for sid in sids]
            if len(set(map(id, sessions))) != len(sessions):
                raise RequestError("sample: a session appears twice; fork it instead")
            results = eng.sample_batch(sessions, params, stops)
            return (
                {"counts": [len(r["tokens"]) for r in results], "finish": [r["finishReason"] for r in results],
                 "evictedTo": [s.evicted_to for s in sessions]},
                {"tokens": np.array([t for r in results for t in r["tokens"]], dtype=np.int32),
                 "logprobs": np.array([x for r in results for x in r["logprobs"]], dtype=np.float32)},
            )
        if op in ("logprobs", "forward"):
            seqs = _split(a.get("tokens", np.zeros(0, np.int32)), a.get("lengths", np.zeros(0, np.int32)), op)
            masks = SequenceMasks()
            if "scored" in a:
                masks.scored = _split(a["scored"], np.array([max(len(q) - 1, 0) for q in seqs]), f"{op} scored")
            lengths = np.array([len(q) for q in seqs])
            if "docIds" in a:
                masks.doc_ids = _split(a["docIds"], lengths, f"{op} docIds")
            if "pinned" in a:
                masks.pinned = _split(a["pinned"], lengths, f"{op} pinned")
            if op == "logprobs":
                return {}, {"logprobs": eng.logprobs(seqs, masks)}
            handle, lp = eng.forward(seqs, masks)
            return {"handle": handle}, {"logprobs": lp}
        if op == "backward":
            eng.backward(_int(h, "handle"), a.get("dlogprobs", np.zeros(0, np.float32)))
            return {}, None
        if op == "reset_optimizer":
            eng.reset_optimizer()
            return {}, None
        if op == "release":
            eng.release()
            return {}, None
        if op == "optim_step":
            norm = eng.optim_step(h)
            return {"gradNorm": norm, "policyVersion": eng.policy_version}, None
        if op == "shutdown":
            return {}, None
        raise RequestError(f"unknown op {op!r}; see python/README.md for the ops")


def _str(h: dict, k: str) -> str:
    v = h.get(k)
    if not isinstance(v, str) or not v:
        raise RequestError(f"{h.get('op')}: {k} must be a non-empty string")
    return v


def _int(h: dict, k: str) -> int:
    v = h.get(k)
    if not isinstance(v, int) or isinstance(v, bool):
        raise RequestError(f"{h.get('op')}: {k} must be an integer")
    return v


class WorkerServer:
    def __init__(self, engine: TorchEngine, token: Optional[str] = None, dist=None):
        self.engine = engine
        self.dist = dist  # distributed.Dist on rank 0 of a torchrun group, else None
        self.token = token or None
        self.lock = threading.Lock()
        self.listener: Optional[socket.socket] = None
        self.address = ""
        self._stopped = threading.Event()
        self._unix_path: Optional[str] = None

    def listen_unix(self, path: str) -> str:
        if os.path.exists(path):
            os.unlink(path)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(path)
        os.chmod(path, 0o600)
        s.listen(16)
        self.listener, self._unix_path = s, path
        self.address = f"unix:{path}"
        return self.address

    def listen_tcp(self, host: str, port: int) -> str:
        if not is_loopback(host) and not self.token:
            raise SystemExit(
                f"sinkflex_worker: listening on {host} (not loopback) needs a token: pass --token or set SINKFLEX_WORKER_TOKEN"
            )
        s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, port))
        s.listen(16)
        self.listener = s
        bound = s.getsockname()[1]
        self.address = f"tcp://{'[' + host + ']' if ':' in host else host}:{bound}"
        return self.address

    def serve_forever(self) -> None:
        assert self.listener is not None
        while not self._stopped.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                break
            if conn.family != socket.AF_UNIX:
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=Connection(self, conn).serve, daemon=True).start()

    def stop(self) -> None:
        self._stopped.set()
        if self.listener is not None:
            try:
                self.listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self.listener.close()
        if self._unix_path and os.path.exists(self._unix_path):
            try:
                os.unlink(self._unix_path)
            except OSError:
                pass
