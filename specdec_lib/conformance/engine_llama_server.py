"""llama.cpp's `llama-server` behind the kit's Engine interface (engines.py): a process on a free loopback port, driven
by token ids over HTTP (urllib's http.client, no new dependency), stopped by its own PID.

Modes (each a server of its own, started on first use and restarted when k changes: the draft length is a server
flag, the request field is compiled out at b11434, the server's server-schema.cpp L194-227):
  "plain"                no speculation: the control
  "draft"                `-md DRAFT --spec-type draft-simple`: the draft's argmax, kept while the target's own sampled
                         token equals it (sample-and-match, common/sampling.cpp L686-717)
  "draft probabilistic"  `--spec-draft-sampling probabilistic`: the draft samples, the target accepts with
                         min(1, p/q), else draws from max(0, p - q) (common/sampling.cpp L729-836)
  "ngram"                `--spec-type ngram-simple` (the last ngram_n tokens looked up, 1 by default; k drafted),
                         sample-and-match
  "synthetic"            the draft model with `--spec-synth-rates`: drafts accepted at random, "benchmarking only"
                         (server-context.cpp L81-122): the negative control, it must fail

The exact law's source, logits(context): the server's own plain row by teacher forcing: a request for one token
with n_probs = V and post_sampling_probs false returns log softmax of the raw row (float32; server-common.cpp
L1591-1641). The raw logits are that plus one offset, and llama.cpp's repetition penalty (logit > 0: / r, else * r;
src/llama-sampler.cpp L2970-2974) is the one processor that needs it: two probes with the penalty on the context's
last token (r = 2 and 1/2, repeat_last_n 1) give that token's raw logit, hence the offset (_offset).
"""
from __future__ import annotations

import http.client
import json
import math
import os
import re
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from threading import local

import torch

from .._checks import check_choice, check_int
from ..surface.settings import Settings

__all__ = ["MODES", "SAMPLERS", "LlamaServerEngine", "binary_path", "server_command", "request_body",
           "llama_server_unsupported"]

MODES = ("plain", "draft", "draft probabilistic", "ngram", "synthetic")
DRAFT_MODES = ("draft", "draft probabilistic", "synthetic")
# the kit's processor order (surface/processors.py: penalties, logit bias, temperature, min_p, top_k, top_p) as
# llama.cpp sampler names; llama.cpp puts logit_bias before the whole chain (common/sampling.cpp L329-341)
SAMPLERS = ("penalties", "temperature", "min_p", "top_k", "top_p")
SYNTH_RATE = 0.9  # per-position acceptance chance of the synthetic control (non-increasing: rate ** (i + 1))
CTX = 256  # context per slot: the tiny models' max_positions (gguf_model.tiny_llama_gguf)
START_TIMEOUT = 120.0  # seconds for a server to answer /health with 200
WINDOW = 1 << 16  # repeat_last_n: the penalties' window, longer than any context here (prompt + generated)


def binary_path() -> Path:
    """${SPECDEC_CACHE:-~/.cache/specdec}/engines/bin/llama-server (tools/engines_env.py builds it)."""
    return Path(os.environ.get("SPECDEC_CACHE", "~/.cache/specdec")).expanduser() / "engines" / "bin" / "llama-server"


def server_command(binary, model, mode: str, *, port: int, k: int = 3, draft=None, slots: int = 1,  # noqa: PLR0913 (a keyword per server flag)
                   threads: int = 1, ctx: int = CTX, ngram_n: int = 1) -> list[str]:
    """The llama-server command line of a mode (module doc), F32 KV cache for the target and the draft, ctx tokens
    of context per slot, /metrics on (its counters include the verification passes); "ngram" looks up the last
    ngram_n tokens."""
    mode = check_choice("mode", mode, MODES)
    k, port = check_int("k", k, minimum=1), check_int("port", port, minimum=1)
    slots, threads = check_int("slots", slots, minimum=1), check_int("threads", threads, minimum=1)
    ctx, ngram_n = check_int("ctx", ctx, minimum=8), check_int("ngram_n", ngram_n, minimum=1)
    if mode in DRAFT_MODES and draft is None:
        raise ValueError(f"draft must name a draft GGUF for mode {mode!r}")
    cmd = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "-c", str(ctx * slots),
           "-np", str(slots), "-t", str(threads), "--cache-type-k", "f32", "--cache-type-v", "f32", "--no-webui",
           "--no-warmup", "-fa", "off", "--metrics"]
    if mode in DRAFT_MODES:
        cmd += ["-md", str(draft), "--spec-type", "draft-simple", "--spec-draft-n-max", str(k),
                "--spec-draft-n-min", "0", "--spec-draft-p-min", "0", "-ctkd", "f32", "-ctvd", "f32",
                "-td", str(threads)]
    if mode == "draft probabilistic":
        cmd += ["--spec-draft-sampling", "probabilistic"]
    if mode == "synthetic":
        cmd += ["--spec-synth-rates", ",".join(f"{SYNTH_RATE ** (i + 1):.6g}" for i in range(k))]
    if mode == "ngram":
        cmd += ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", str(ngram_n),
                "--spec-ngram-simple-size-m", str(k)]
    return cmd


def llama_server_unsupported(settings: Settings, eos: int) -> str | None:
    """None, or why llama-server's semantics differ from the kit's for these settings (the model's EOS is eos)."""
    if not isinstance(settings, Settings):
        raise TypeError(f"settings must be a Settings, got {type(settings).__name__}")
    if settings.frequency_penalty or settings.presence_penalty:
        return ("frequency and presence penalties count the prompt in llama.cpp (every prompt token is accepted into "
                "the sampler, server-context.cpp L429-436), the kit counts the generated tokens only")
    if settings.repetition_penalty != 1.0 and settings.logit_bias:
        return "llama.cpp adds the logit bias before the penalties (common/sampling.cpp L329-341), the kit after"
    if settings.no_repeat_ngram_size or settings.bad_words:
        return "llama-server has no n-gram or bad-word bans"
    if settings.grammar is not None:
        return "the kit's grammar is an automaton over ids; llama-server takes GBNF over text (not mapped here)"
    if settings.eos is not None and settings.eos != eos:
        return f"llama-server stops only at the model's EOS (id {eos}), the settings ask for {settings.eos}"
    return None


def request_body(settings: Settings, prompt, n_predict: int, seed: int, *, logprobs: bool = False) -> dict:
    """The /completion request of one generation: token ids in, token ids out, the kit's sampler order."""
    on = set(settings.features)
    samplers = [name for name, feature in zip(SAMPLERS, ("repetition_penalty", "temperature", "min_p", "top_k",
                                                           "top_p")) if feature in on]
    body = {"prompt": [int(t) for t in prompt], "n_predict": int(n_predict), "seed": int(seed), "samplers": samplers,
            "temperature": settings.temperature, "top_k": settings.top_k or 0, "top_p": settings.top_p or 1.0,
            "min_p": settings.min_p or 0.0, "repeat_penalty": settings.repetition_penalty, "repeat_last_n": WINDOW,
            "frequency_penalty": 0.0, "presence_penalty": 0.0, "logit_bias": [[t, b] for t, b in settings.logit_bias],
            "return_tokens": True, "response_fields": ["tokens", "stop_type", "completion_probabilities"]}
    if logprobs:
        body.update(n_probs=1, post_sampling_probs=True)
    return body


class _Server:
    """One llama-server process on a free port: started, waited for (/health), stopped by its own PID."""

    def __init__(self, cmd_for_port, log_path: Path, timeout: float):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.cmd = cmd_for_port(self.port)
        self.log_path = log_path
        began = time.perf_counter()
        with log_path.open("ab") as log:
            self.process = subprocess.Popen(self.cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self._local = local()
        while True:
            if self.process.poll() is not None:
                tail = log_path.read_text(errors="replace").splitlines()[-5:]
                raise RuntimeError(f"llama-server exited with {self.process.returncode}: " + " | ".join(tail))
            try:
                if self._get("/health") == 200:
                    break
            except OSError:
                pass
            if time.perf_counter() - began > timeout:
                self.stop()
                raise RuntimeError(f"llama-server not healthy after {timeout} s (log {log_path})")
            time.sleep(0.05)
        self.start_seconds = time.perf_counter() - began

    def _connection(self) -> http.client.HTTPConnection:
        if getattr(self._local, "conn", None) is None:  # one keep-alive connection per thread
            self._local.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        return self._local.conn

    def _get(self, path: str) -> int:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
        try:
            conn.request("GET", path)
            return conn.getresponse().status
        finally:
            conn.close()

    def post(self, path: str, body: dict) -> dict:
        """POST body as JSON, the JSON answer; a RuntimeError naming the server's error."""
        data = json.dumps(body).encode()
        for attempt in (0, 1):  # a keep-alive connection the server closed is reopened once
            conn = self._connection()
            try:
                conn.request("POST", path, data, {"Content-Type": "application/json"})
                response = conn.getresponse()
                answer = json.loads(response.read())
                break
            except (http.client.HTTPException, ConnectionError):
                conn.close()
                self._local.conn = None
                if attempt:
                    raise
        if response.status != 200:
            raise RuntimeError(f"llama-server {path}: HTTP {response.status}: {answer}")
        return answer

    def metrics(self) -> dict[str, float]:
        """The /metrics counters and gauges (Prometheus text), by name without the "llamacpp:" prefix."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request("GET", "/metrics")
            text = conn.getresponse().read().decode()
        finally:
            conn.close()
        return {name.split(":", 1)[-1]: float(value) for name, value in
                (line.split()[:2] for line in text.splitlines() if line and not line.startswith("#"))}

    def stop(self) -> None:
        """Terminate the process by its PID, wait, kill it if it lingers."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def _row(answer: dict, vocab: int) -> torch.Tensor:
    """The (V,) float64 log probabilities of a one-token answer's completion_probabilities (-inf where absent)."""
    entry = answer["completion_probabilities"][0]
    row = torch.full((vocab,), -math.inf, dtype=torch.float64)
    for item in entry.get("top_logprobs", entry.get("top_probs", [])):
        row[int(item["id"])] = item["logprob"] if "logprob" in item else math.log(item["prob"]) if item["prob"] > 0 \
            else -math.inf
    return row


class LlamaServerEngine:
    """llama-server behind engines.Engine (module doc): modes served by processes it starts; a context manager."""

    name = "llama-server"

    def __init__(self, model, *, vocab: int, eos: int, draft=None, binary=None, slots: int = 4, threads: int = 1,  # noqa: PLR0913 (server_command's flags)
                 logprobs: bool = False, ctx: int = CTX, ngram_n: int = 1):
        self.binary = Path(binary) if binary is not None else binary_path()
        if not self.binary.exists():
            raise FileNotFoundError(f"binary: no llama-server at {self.binary} (make engines-env builds it)")
        self.model = Path(model)
        self.draft = None if draft is None else Path(draft)
        for name, path in (("model", self.model), ("draft", self.draft)):
            if path is not None and not path.exists():
                raise FileNotFoundError(f"{name}: no GGUF at {path}")
        self.vocab, self.eos = check_int("vocab", vocab, minimum=2), check_int("eos", eos, minimum=0)
        self.slots, self.threads = check_int("slots", slots, minimum=1), check_int("threads", threads, minimum=1)
        self.ctx, self.ngram_n = check_int("ctx", ctx, minimum=8), check_int("ngram_n", ngram_n, minimum=1)
        self.modes = MODES if self.draft else tuple(m for m in MODES if m not in DRAFT_MODES)
        self.logprobs = bool(logprobs)
        out = subprocess.run([str(self.binary), "--version"], capture_output=True, text=True, timeout=60)
        build = re.search(r"\(build (\d+),", out.stdout + out.stderr)  # "version: 0.6.0-dev (build 11434, commit ..."
        self.version = f"b{build.group(1)}" if build else "unknown"
        self.log_dir = self.binary.parent.parent / "server-logs"  # a log per mode, appended
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._servers: dict[str, tuple[int, _Server]] = {}
        self._pool = ThreadPoolExecutor(self.slots)
        self.start_seconds: dict[str, float] = {}  # mode: seconds from the process's start to a healthy server
        self.requests, self.request_seconds = 0, 0.0  # generation requests and the wall time they took

    def __enter__(self) -> LlamaServerEngine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def server(self, mode: str, k: int = 3) -> _Server:
        """The running server of mode with drafts of k (started, or restarted when k changed)."""
        mode = check_choice("mode", mode, self.modes)
        k = 1 if mode == "plain" else check_int("k", k, minimum=1)
        if mode in self._servers and self._servers[mode][0] == k:
            return self._servers[mode][1]
        if mode in self._servers:
            self._servers.pop(mode)[1].stop()
        log = self.log_dir / f"{mode.replace(' ', '-')}.log"
        server = _Server(lambda port: server_command(self.binary, self.model, mode, port=port, k=k, draft=self.draft,
                                                     slots=self.slots, threads=self.threads, ctx=self.ctx,
                                                     ngram_n=self.ngram_n), log, START_TIMEOUT)
        self._servers[mode] = (k, server)
        self.start_seconds[mode] = server.start_seconds
        return server

    def unsupported(self, settings: Settings, mode: str = "plain") -> str | None:
        """None, or why the server's semantics differ from the kit's (llama_server_unsupported)."""
        return llama_server_unsupported(settings, self.eos)

    def _probe(self, server: _Server, context: tuple[int, ...], penalty: float | None) -> torch.Tensor:
        """The row after context: raw log softmax (penalty None), or after a repetition penalty on the last token."""
        body = {"prompt": list(context), "n_predict": 1, "n_probs": self.vocab, "seed": 0, "temperature": 1.0,
                "samplers": ["penalties"] if penalty else [], "repeat_penalty": penalty or 1.0, "repeat_last_n": 1,
                "post_sampling_probs": penalty is not None, "response_fields": ["completion_probabilities"]}
        return _row(server.post("/completion", body), self.vocab)

    def _offset(self, server: _Server, context: tuple[int, ...], a: torch.Tensor) -> float:
        """raw logits - log softmax, from the penalty's effect on the last token t (its raw logit l): the other
        tokens move by the normaliser only, t by l/r - l when l > 0, else l*r - l; r = 2 and 1/2 tell the sign."""
        t = context[-1]
        moved = []
        for r in (2.0, 0.5):
            b = self._probe(server, context, r)
            others = [i for i in range(self.vocab) if i != t and math.isfinite(a[i]) and math.isfinite(b[i])]
            shift = sum(float(b[i] - a[i]) for i in others) / len(others)
            moved.append(float(b[t] - a[t]) - shift)
        d2, d05 = moved  # l > 0: d2 = -l/2, d05 = l; l <= 0: d2 = l, d05 = -l/2
        l_pos, l_neg = d05, d2
        positive = abs(d05 + 2 * d2) <= abs(d05 + d2 / 2)
        gap = abs(d05 + 2 * d2) if positive else abs(d05 + d2 / 2)
        if gap > 1e-3 * max(1.0, abs(d2)):  # float32 rounding leaves ~1e-6; a larger gap: not the penalty modelled
            raise RuntimeError(f"logits({context}): the repetition-penalty probes disagree (d2 {d2}, d05 {d05})")
        return (l_pos if positive else l_neg) - float(a[t])

    def logits(self, context: tuple[int, ...]) -> torch.Tensor:
        """The raw (V,) logits after context from the plain server by teacher forcing (module doc), float64."""
        context = tuple(check_int("context token", t, minimum=0) for t in context)
        if not context:
            raise ValueError("context must hold at least one token")
        server = self.server("plain")
        a = self._probe(server, context, None)
        return a + self._offset(server, context, a)

    def _one(self, server: _Server, prompt: tuple[int, ...], settings: Settings, seed: int) -> tuple:
        """One seeded generation; an EOS the settings do not name is continued past by a fresh request (the server
        always stops at its EOS), seeded from seed and the part's index."""
        tokens, logprobs, part = [], [], 0
        while True:
            body = request_body(settings, prompt + tuple(tokens), settings.max_new_tokens - len(tokens),
                                (seed + 7919 * part) % (2**31 - 1), logprobs=self.logprobs)
            answer = server.post("/completion", body)
            tokens += [int(t) for t in answer["tokens"]]
            if self.logprobs:
                logprobs += [math.log(e["prob"]) if e["prob"] > 0 else -math.inf
                             for e in answer.get("completion_probabilities", [])]
            stop = {"eos": "eos", "limit": "length"}.get(answer["stop_type"], answer["stop_type"])
            if stop == "eos" and settings.eos is None:  # the kit's settings have no EOS: an ordinary token
                if len(tokens) < settings.max_new_tokens:
                    part += 1
                    continue
                stop = "length"
            return tuple(tokens), tuple(logprobs) if self.logprobs else None, stop

    def generate(self, mode: str, prompt: tuple[int, ...], settings: Settings, k: int, seeds: list[int]) -> list:
        """One (tokens, logprobs | None, stop) per seed, the requests spread over the server's slots."""
        why = self.unsupported(settings, mode)
        if why is not None:
            raise ValueError(f"settings: {why}")
        server = self.server(mode, k)
        prompt = tuple(check_int("prompt token", t, minimum=0) for t in prompt)
        seeds = [check_int("seed", s, minimum=0) for s in seeds]
        began = time.perf_counter()
        out = list(self._pool.map(lambda s: self._one(server, prompt, settings, s), seeds))
        self.requests += len(seeds)
        self.request_seconds += time.perf_counter() - began
        return out

    def close(self) -> None:
        """Stop every server this engine started (by PID) and its request threads."""
        while self._servers:
            self._servers.popitem()[1][1].stop()
        self._pool.shutdown(wait=True)
