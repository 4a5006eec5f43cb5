"""Write a synthetic vLLM server log of a given size, and what it injected.

Three shapes, all seeded and deterministic (same seed and size, same bytes):

- ``mix``: a busy server as vLLM's defaults have it: request logging off (so no
  "Received", "Added" or "Aborted request" lines), uvicorn's access log on, one access
  line per request at MIX_REQUESTS_PER_SECOND, a metrics line every MIX_METRICS_EVERY
  seconds per engine (MIX_ENGINES), V1's process tag on every line.
- ``request-log``: vLLM with request logging on. Every request is one line holding
  its whole prompt and token ids (10 KB to a few MB); some prompts quote error
  messages and tracebacks, which are not server events (decoys).
- ``access-log``: request logging off. Millions of short uvicorn access lines (some
  with ANSI colour inside the quotes), periodic metrics lines, aborted requests.

Both carry startup blocks and, now and then, a real error event: one of the
catalog's wordings, as a log line, inside a prefixed or a bare traceback, as a
client's error body, with or without process tags and ANSI colour, sometimes
wrapped over two lines by a terminal. The sidecar JSON (``--counts``) holds the
exact number of events injected per rule code: a scanner must find exactly
these, and nothing in the decoys.

Noise is cut from a pool of pre-rendered blocks so that 10 GiB can be generated
into a pipe faster than it can be scanned.

    python benchmarks/generate.py --shape access-log --size 256M -o benchmarks/data/access.log
    python benchmarks/generate.py --shape request-log --size 10G -o - | vllm-triage scan -
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections import Counter
from collections.abc import Callable
from typing import BinaryIO

SHAPES = ("mix", "request-log", "access-log")  # the realistic mix first, then the stress shapes
MIX_REQUESTS_PER_SECOND = 50
MIX_METRICS_EVERY = 10  # seconds: vLLM's default stats interval
MIX_ENGINES = 1
EVENT_EVERY = 1 << 20  # about one error event per MiB of log
STARTUP_EVERY = 64 << 20  # a server restart every 64 MiB
POOL_BLOCKS = 48
ANSI_LEVEL = {"INFO": "\x1b[32mINFO\x1b[0m", "ERROR": "\x1b[31mERROR\x1b[0m", "WARNING": "\x1b[33mWARNING\x1b[0m"}
WORDS = ["the", "a", "model", "server", "token", "window", "cache", "memory", "request", "batch", "prompt", "answer", "user", "system", "summarise", "translate", "explain", "write", "code", "function", "table", "report", "please", "carefully", "step", "context", "length", "budget", "invoice", "customer", "order", "shipment", "weather", "paris", "tokyo", "python", "rust", "kernel", "gradient", "layer", "attention", "head", "sequence", "scheduler", "block", "page", "latency", "throughput"]
TAGS = {"seeded": None, "on": True, "off": False}
PATHS = ("/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/metrics", "/v1/embeddings")


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().removesuffix("IB").removesuffix("B")
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


# --- the events: each returns the message text and the rule code it must yield ---------------


def _ctx_plus_completion(rng: random.Random) -> tuple[str, str]:
    window = rng.choice((4096, 8192, 16384, 32768))
    completion = rng.randint(200, 3000)
    prompt = window - completion + rng.randint(1, 900)
    return "VT101", (
        f"This model's maximum context length is {window} tokens. However, you requested "
        f"{prompt + completion} tokens ({prompt} in the messages, {completion} in the completion). "
        "Please reduce the length of the messages or completion."
    )


def _max_tokens_too_large(rng: random.Random) -> tuple[str, str]:
    window = rng.choice((8192, 32768, 40960))
    prompt = rng.randint(window // 2, window - 10)
    completion = window - prompt + rng.randint(1, 4000)
    return "VT101", (
        f"'max_tokens' or 'max_completion_tokens' is too large: {completion}. This model's maximum "
        f"context length is {window} tokens and your request has {prompt} input tokens "
        f"({completion} > {window} - {prompt}). None"
    )


def _you_passed(rng: random.Random) -> tuple[str, str]:
    window = rng.choice((16384, 32768))
    completion = rng.randint(1000, 8000)
    prompt = window - completion + rng.randint(1, 500)
    return "VT101", (
        f"You passed {prompt} input tokens and requested {completion} output tokens. However, the "
        f"model's context length is only {window} tokens, resulting in a maximum input length of "
        f"{window - completion} tokens. Please reduce the length of the input prompt. "
        f"(parameter=input_tokens, value={prompt})"
    )


def _request_has(rng: random.Random) -> tuple[str, str]:
    window = rng.choice((8192, 131072))
    return "VT102", (
        f"This model's maximum context length is {window} tokens. However, your request has "
        f"{window + rng.randint(1, 9000)} input tokens. Please reduce the length of the input messages."
    )


def _input_length(rng: random.Random) -> tuple[str, str]:
    window = rng.choice((16384, 32768))
    return "VT102", f"Input length ({window + rng.randint(1, 5000)}) exceeds model's maximum context length ({window})."


def _decoder_prompt(rng: random.Random) -> tuple[str, str]:
    window = rng.choice((4096, 32768))
    return "VT102", (
        f"The decoder prompt (length {window + rng.randint(0, 800)}) is longer than the maximum model "
        f"length of {window}. Make sure that `max_model_len` is no smaller than the number of text tokens."
    )


def _max_tokens_gt_len(rng: random.Random) -> tuple[str, str]:
    window = rng.choice((8192, 16384))
    param = rng.choice(("max_tokens", "max_completion_tokens"))
    return "VT103", (
        f"{param}={window + rng.randint(1, 60000)} cannot be greater than max_model_len={window}. "
        "Please request fewer output tokens."
    )


def _kv_gib(rng: random.Random) -> tuple[str, str]:
    window = rng.choice((65536, 131072))
    needed = window / 8192
    available = round(needed * rng.uniform(0.3, 0.9), 2)
    estimate = int(window * available / needed) // 16 * 16
    return "VT201", (
        f"To serve at least one request with the models's max seq len ({window}), ({needed:.2f} GiB KV "
        f"cache is needed, which is larger than the available KV cache memory ({available:.2f} GiB). "
        f"Based on the available memory, the estimated maximum model length is {estimate}. Try "
        "increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."
    )


def _kv_tokens(rng: random.Random) -> tuple[str, str]:
    window = rng.choice((32768, 65536))
    return "VT201", (
        f"The model's max seq len ({window}) is larger than the maximum number of tokens that can be "
        f"stored in KV cache ({rng.randint(4000, window - 1)}). Try increasing `gpu_memory_utilization` "
        "or decreasing `max_model_len` when initializing the engine."
    )


def _no_blocks(rng: random.Random) -> tuple[str, str]:
    return "VT202", (
        "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
        "initializing the engine."
    )


def _user_gt_derived(rng: random.Random) -> tuple[str, str]:
    derived = rng.choice((32768, 131072))
    return "VT401", (
        f"User-specified max_model_len ({derived * 2}) is greater than the derived max_model_len "
        f"(max_position_embeddings={derived} in model's config.json). This may lead to incorrect "
        "model outputs or CUDA errors. Make sure the value is correct and within the model context size."
    )


def _batched_lt_len(rng: random.Random) -> tuple[str, str]:
    window = rng.choice((16384, 32768))
    return "VT402", (
        f"max_num_batched_tokens ({rng.choice((2048, 4096, 8192))}) is smaller than max_model_len "
        f"({window}). This effectively limits the maximum sequence length to max_num_batched_tokens "
        "and makes vLLM reject longer sequences. Please increase max_num_batched_tokens or decrease max_model_len."
    )


REQUEST_EVENTS = (_ctx_plus_completion, _max_tokens_too_large, _you_passed, _request_has,
                  _input_length, _decoder_prompt, _max_tokens_gt_len)
STARTUP_EVENTS = (_kv_gib, _kv_tokens, _no_blocks, _user_gt_derived, _batched_lt_len)
ALL_EVENTS = REQUEST_EVENTS + STARTUP_EVENTS


# --- the log -----------------------------------------------------------------------------------


class LogWriter:
    def __init__(self, shape: str, seed: int, out: BinaryIO, pool_blocks: int = POOL_BLOCKS, tagged: bool | None = None):
        """tagged: V1's process tag on every line; None: as the seed picks (half of the seeds)."""
        self.shape = shape
        self.rng = random.Random(seed)
        self.out = out
        self.written = 0
        self.counts: Counter[str] = Counter()
        self.decoys = 0
        seeded = self.rng.random() < 0.5 or shape == "mix"  # a server that tags its lines (0.10 - 0.30); drawn either way
        self.tagged = seeded if tagged is None else tagged
        self.pool = self._noise_pool(pool_blocks)

    # prefixes ------------------------------------------------------------------------------

    def stamp(self) -> str:
        rng = self.rng
        return f"{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d} {rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"

    def prefix(self, level: str, where: str, process: str = "APIServer", colour: bool = False) -> str:
        shown = ANSI_LEVEL[level] if colour else level
        tag = f"({process} pid={self.rng.randint(100, 9999)}) " if self.tagged or process != "APIServer" else ""
        if colour and tag:
            tag = f"\x1b[0;36m{tag.rstrip()}\x1b[0;0m "
        return f"{tag}{shown} {self.stamp()} [{where}] "

    # noise ---------------------------------------------------------------------------------

    def access_line(self) -> str:
        rng = self.rng
        path = rng.choice(PATHS)
        method = "GET" if path in ("/v1/models", "/health", "/metrics") else "POST"
        status = rng.choices(("200 OK", "400 Bad Request", "499 Client Closed Request"), (40, 1, 1))[0]
        request = f"{method} {path} HTTP/1.1"
        if rng.random() < 0.2:
            request = f"\x1b[1m{request}\x1b[0m"
            status = f"\x1b[32m{status}\x1b[0m"
        tag = f"(APIServer pid={rng.randint(100, 9999)}) " if self.tagged else ""
        ip = f"10.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}:{rng.randint(1024, 65535)}"
        return f'{tag}INFO:     {ip} - "{request}" {status}\n'

    def metrics_line(self, engine: int = 0) -> str:
        rng = self.rng
        return self.prefix("INFO", "loggers.py:123") + (
            f"Engine {engine:03d}: Avg prompt throughput: {rng.uniform(0, 9000):.1f} tokens/s, Avg generation "
            f"throughput: {rng.uniform(0, 900):.1f} tokens/s, Running: {rng.randint(0, 64)} reqs, Waiting: "
            f"{rng.randint(0, 30)} reqs, GPU KV cache usage: {rng.uniform(0, 90):.1f}%, Prefix cache hit "
            f"rate: {rng.uniform(0, 90):.1f}%\n"
        )

    def aborted_line(self) -> str:
        return self.prefix("INFO", "async_llm.py:420") + f"Aborted request chatcmpl-{self.rng.getrandbits(64):016x}.\n"

    def prompt_text(self, size: int) -> tuple[str, int]:
        """Prompt text as vLLM logs it (a Python repr: newlines escaped); maybe quoting errors."""
        rng = self.rng
        parts, length, decoys = [], 0, 0
        while length < size:
            if rng.random() < 0.002:
                _, message = rng.choice(ALL_EVENTS)(rng)
                quoted = rng.choice((
                    f"My server logs say: {message} What does it mean?",
                    f"Traceback (most recent call last):\\n  File \\\"serve.py\\\", line 12, in <module>\\nValueError: {message}\\n",
                    f"ERROR 01-02 03:04:05 [core.py:700] ValueError: {message}\\n",
                ))
                parts.append(quoted.replace("'", "\\'"))
                decoys += 1
            else:
                parts.append(" ".join(rng.choices(WORDS, k=12)) + (".\\n" if rng.random() < 0.3 else ". "))
            length += len(parts[-1])
        return "".join(parts), decoys

    def request_line(self) -> tuple[str, int]:
        rng = self.rng
        size = int(rng.choice((10_000, 30_000, 80_000, 200_000, 600_000)) * rng.uniform(0.5, 1.5))
        if rng.random() < 0.04:
            size = rng.randint(1_000_000, 4_000_000)
        prompt, decoys = self.prompt_text(size)
        ids = ", ".join(str(rng.randint(10, 151000)) for _ in range(min(size // 4, 60_000)))
        line = self.prefix("INFO", "logger.py:43") + (
            f"Received request chatcmpl-{rng.getrandbits(64):016x}: prompt: '{prompt}', params: "
            f"SamplingParams(n=1, presence_penalty=0.0, frequency_penalty=0.0, repetition_penalty=1.0, "
            f"temperature=0.7, top_p=1.0, top_k=-1, min_p=0.0, seed=None, stop=[], stop_token_ids=[], "
            f"max_tokens={rng.randint(16, 4096)}, min_tokens=0, logprobs=None, skip_special_tokens=True), "
            f"prompt_token_ids: [{ids}], lora_request: None, prompt_adapter_request: None.\n"
        )
        return line, decoys

    def _noise_pool(self, blocks: int) -> list[tuple[bytes, int]]:
        """Pre-rendered noise blocks (bytes, decoys quoted in them)."""
        pool = []
        for _ in range(blocks):
            lines, decoys = [], 0
            if self.shape == "request-log":
                line, decoys = self.request_line()
                lines.append(line)
                lines.append(self.prefix("INFO", "async_llm.py:261") + f"Added request chatcmpl-{self.rng.getrandbits(64):016x}.\n")
                lines.append(self.access_line())
                if self.rng.random() < 0.3:
                    lines.append(self.metrics_line())
            elif self.shape == "mix":  # one stats interval of server time
                lines += [self.access_line() for _ in range(MIX_REQUESTS_PER_SECOND * MIX_METRICS_EVERY)]
                lines += [self.metrics_line(engine) for engine in range(MIX_ENGINES)]
            else:
                length = 0
                while length < 256 << 10:
                    roll = self.rng.random()
                    if roll < 0.01:
                        lines.append(self.metrics_line())
                    elif roll < 0.03:
                        lines.append(self.aborted_line())
                    else:
                        lines.append(self.access_line())
                    length += len(lines[-1])
            pool.append(("".join(lines).encode(), decoys))
        return pool

    # events --------------------------------------------------------------------------------

    def event_lines(self, make: Callable[[random.Random], tuple[str, str]]) -> tuple[list[str], str, int]:
        """One error event in one of its presentations: the lines and how many findings it makes."""
        rng = self.rng
        code, message = make(rng)
        startup = make in STARTUP_EVENTS
        process = "EngineCore_DP0" if startup else "APIServer"
        colour = rng.random() < 0.2
        style = rng.choice(("line", "logged-traceback", "bare-traceback", "client-body", "wrapped"))
        if style == "line":
            return [self.prefix("ERROR", "serving_chat.py:222", process, colour) + message + "\n"], code, 1
        if style == "logged-traceback":
            head = self.prefix("ERROR", "core.py:700", process, colour)
            header = "EngineCore failed to start." if startup else "Error in preprocessing prompt inputs"
            frames = [
                f"{head}{header}\n",
                f"{head}Traceback (most recent call last):\n",
                f'{head}  File "/usr/local/lib/python3.12/dist-packages/vllm/engine/core.py", line {rng.randint(50, 900)}, in run\n',
                f"{head}    raise ValueError(\n",
                f"{head}ValueError: {message}\n",
            ]
            return frames, code, 1
        if style == "bare-traceback":
            tag = f"({process} pid={rng.randint(100, 9999)}) " if rng.random() < 0.5 else ""
            frames = [
                f"{tag}Traceback (most recent call last):\n",
                f'{tag}  File "/usr/lib/python3.12/multiprocessing/process.py", line 314, in _bootstrap\n',
                f"{tag}    self.run()\n",
                f"{tag}ValueError: {message}\n",
            ]
            return frames, code, 1
        if style == "client-body":
            body = json.dumps({"error": {"message": message, "type": "BadRequestError", "param": None, "code": 400}})
            return [f"openai.BadRequestError: Error code: 400 - {body}\n"], code, 1
        # wrapped by a terminal 80 columns wide, cut mid-word
        text = "ValueError: " + message
        cut = rng.randint(len(text) // 3, 2 * len(text) // 3)
        return [text[:cut] + "\n", text[cut:] + "\n"], code, 1

    def startup_block(self) -> list[str]:
        rng = self.rng
        window = rng.choice((8192, 32768, 131072))
        model = rng.choice(("Qwen/Qwen2.5-7B-Instruct", "meta-llama/Llama-3.1-8B-Instruct"))
        core = "EngineCore_DP0"
        return [
            self.prefix("INFO", "utils.py:233") + f"non-default args: {{'model': '{model}', 'max_model_len': {window}, 'gpu_memory_utilization': 0.9}}\n",
            self.prefix("INFO", "model.py:1750") + f"Using max model len {window}\n",
            self.prefix("INFO", "core.py:97", core) + f"Initializing a V1 LLM engine (v0.11.0) with config: model='{model}', dtype=torch.bfloat16, max_seq_len={window}, tensor_parallel_size=1, kv_cache_dtype=auto\n",
            self.prefix("INFO", "gpu_model_runner.py:2007", core) + f"Model loading took {rng.uniform(10, 20):.1f} GiB memory and 8.1 seconds\n",
            self.prefix("INFO", "gpu_worker.py:232", core) + f"Available KV cache memory: {rng.uniform(5, 40):.2f} GiB\n",
            self.prefix("INFO", "kv_cache_utils.py:849", core) + f"GPU KV cache size: {rng.randint(50, 900) * 1024:,} tokens\n",
            self.prefix("INFO", "kv_cache_utils.py:853", core) + f"Maximum concurrency for {window:,} tokens per request: {rng.uniform(1, 30):.2f}x\n",
            self.prefix("INFO", "api_server.py:1090") + "Starting vLLM API server 0 on http://0.0.0.0:8000\n",
        ]

    # writing -------------------------------------------------------------------------------

    def emit(self, data: bytes) -> None:
        self.out.write(data)
        self.written += len(data)

    def run(self, size: int) -> None:
        next_event = EVENT_EVERY // 2
        next_startup = 0
        while self.written < size:
            if self.written >= next_startup:
                self.emit("".join(self.startup_block()).encode())
                next_startup += STARTUP_EVERY
            if self.written >= next_event:
                events = STARTUP_EVENTS if self.rng.random() < 0.3 else REQUEST_EVENTS
                lines, code, findings = self.event_lines(self.rng.choice(events))
                self.emit("".join(lines).encode())
                self.counts[code] += findings
                next_event += EVENT_EVERY
            block, decoys = self.pool[self.rng.randrange(len(self.pool))]
            self.emit(block)
            self.decoys += decoys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=SHAPES, required=True)
    parser.add_argument("--size", default="256M", help="bytes to write, e.g. 256M, 1G, 10G (default 256M)")
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("-o", "--output", default="-", help="file to write, or - for stdout")
    parser.add_argument("--counts", help="write the injected counts here as JSON")
    parser.add_argument("--tags", choices=TAGS, default="seeded",
                        help="V1's (APIServer pid=N) tag on every line: as the seed picks (default), always, never")
    args = parser.parse_args(argv)
    out = sys.stdout.buffer if args.output == "-" else open(args.output, "wb")  # noqa: SIM115
    writer = LogWriter(args.shape, args.seed, out, tagged=TAGS[args.tags])
    try:
        writer.run(parse_size(args.size))
    except BrokenPipeError:
        return 1
    finally:
        if out is not sys.stdout.buffer:
            out.close()
    if args.counts:
        document = {"shape": args.shape, "seed": args.seed, "bytes": writer.written,
                    "findings": dict(sorted(writer.counts.items())), "decoys": writer.decoys}
        with open(args.counts, "w") as handle:
            json.dump(document, handle, indent=2)
            handle.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
