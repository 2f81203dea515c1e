"""The sandbox's stand-in for the llama-server container: takes llama-server's arguments (paths
already mapped to the host), records which model file it loaded (its sha256) and answers /health
the way llama-server does: 503 "Loading model" during the load, then 200. A context larger than
the host's GPU fits (``fits_ctx_size`` in its state, when set) ends the load with llama.cpp's CUDA
out-of-memory lines and exit 1, as on an L4 given too large a ctxSize.

Standard library only; started by the docker stub in a session of its own.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

BIND_ATTEMPTS = 100
BIND_RETRY_S = 0.05
OUT_OF_MEMORY = """\
ggml_backend_cuda_buffer_type_alloc_buffer: allocating {mib}.00 MiB on device 0: \
cudaMalloc failed: out of memory
alloc_tensor_range: failed to allocate CUDA0 buffer of size {mib}
llama_init_from_model: failed to initialize the context: failed to allocate buffer for kv cache
common_init_from_params: failed to create context with model
srv    load_model: failed to load model
main: exiting due to model loading error"""


# A decode-speed model for the calibration's requests (not a measurement): plain decode at the
# original write-up's measured 73 tok/s (ECC off), MTP with per-position acceptance 0.85, 0.7,
# 0.55 and a verify step costing 1.5 + 0.2 x n-max plain steps (n-max 2 then gives ~94 tok/s, in
# the original's 91-99), GPU sampling 3 % faster, fusion off 5 % slower. ``gpu.decode`` in the
# host state replaces any of these (a test's model whose drafts are never accepted, say).
DECODE = {
    "plain_tps": 73.0,
    "acceptance": [0.85, 0.7, 0.55],
    "verify_base": 1.5,
    "verify_per_draft": 0.2,
    "gpu_sampling_gain": 0.03,
    "fusion_off_cost": 0.05,
}
FUSION_ENV = "GGML_CUDA_DISABLE_FUSION"


def decode(model: dict[str, Any], n_max: int, gpu_sampling: bool, fusion: bool) -> tuple[float, float]:
    """(tok/s, tokens per decode step) of a server with these options under the speed model."""
    per_step, accepted_all = 1.0, 1.0
    for position in range(n_max):
        rates = model["acceptance"]
        accepted_all *= rates[position] if position < len(rates) else 0.0
        per_step += accepted_all
    cost = 1.0 if n_max == 0 else model["verify_base"] + model["verify_per_draft"] * n_max
    rate = model["plain_tps"] * per_step / cost
    rate *= 1 + model["gpu_sampling_gain"] if gpu_sampling else 1.0
    rate /= 1.0 if fusion else 1 + model["fusion_off_cost"]
    return rate, per_step


def main() -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser.add_argument("--model", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--ctx-size", type=int, required=True)
    parser.add_argument("--api-key-file")
    parser.add_argument("--spec-draft-n-max", type=int, default=0)
    parser.add_argument("--backend-sampling", action="store_true")
    args, _ = parser.parse_known_args()
    model = Path(args.model)
    loaded_at = time.time()
    sha = hashlib.sha256(model.read_bytes()).hexdigest() if model.is_file() else None
    loads_log = Path(os.environ["QWEN36_SANDBOX_HOST"]) / "loads.jsonl"
    entry = {
        "event": "load",
        "t": loaded_at,
        "model": str(model),
        "sha256": sha,
        "ctx_size": args.ctx_size,
        "api_key_file": bool(args.api_key_file and Path(args.api_key_file).is_file()),
        "container": os.environ.get("QWEN36_SANDBOX_CONTAINER", ""),
    }
    with loads_log.open("a") as log:
        log.write(json.dumps(entry) + "\n")
    if sha is None:
        print(f"llama_model_load: error loading model: failed to open {args.model}", flush=True)
        return 1
    delays = json.loads(os.environ.get("QWEN36_SANDBOX_DELAYS", "{}"))
    # Loading 22 GB runs at tmpfs speed from RAM; from the boot disk at page-cache speed when the
    # file was written since this power-on, else at the disk's read rate (bench/boot_bench.py).
    ram = os.environ.get("QWEN36_SANDBOX_RAM_DIR", "\0")
    host = json.loads((loads_log.parent / "host.json").read_text())
    if str(model).startswith(ram):
        where = "load_ram"
    elif model.stat().st_mtime > float(host.get("powered_at", 0)):
        where = "load_disk_warm"
    else:
        where = "load_disk_cold"
    ready_at = loaded_at + float(delays.get(where, delays.get("load", 0)))
    print(f"main: loading model {args.model} (ctx {args.ctx_size})", flush=True)
    gpu = json.loads((loads_log.parent / "host.json").read_text())["gpu"]
    if args.ctx_size > gpu.get("fits_ctx_size", args.ctx_size):
        # llama.cpp's log, in shape, when the KV cache does not fit in VRAM next to the weights.
        print(OUT_OF_MEMORY.format(mib=args.ctx_size // 8), flush=True)
        return 1

    served: list[bool] = []

    def note_healthy() -> None:
        # The first 200 is the moment this model file starts being served.
        if not served:
            served.append(True)
            with loads_log.open("a") as log:
                log.write(json.dumps({**entry, "t": time.time(), "event": "healthy"}) + "\n")

    model = {**DECODE, **gpu.get("decode", {})}
    fusion = os.environ.get(FUSION_ENV, "") != "1"
    counters = {"tokens": 0.0, "seconds": 0.0, "drafted": 0.0, "accepted": 0.0}

    def chat(body: dict[str, Any]) -> dict[str, Any]:
        tokens = int(body.get("max_tokens", 16))
        rate, per_step = decode(
            model, args.spec_draft_n_max, bool(body.get("backend_sampling", args.backend_sampling)), fusion
        )
        # The decode takes its simulated time at the sandbox's scale (delays "decode", tests/boot/
        # durations.py; absent in the tests: no wait).
        time.sleep(tokens / rate * float(delays.get("decode", 0)))
        timings: dict[str, Any] = {
            "prompt_n": 24, "prompt_ms": 50.0, "prompt_per_second": 480.0,
            "predicted_n": tokens, "predicted_ms": tokens / rate * 1000.0, "predicted_per_second": rate,
        }  # fmt: skip
        if args.spec_draft_n_max:
            steps = tokens / per_step
            timings["draft_n"] = round(steps * args.spec_draft_n_max)
            timings["draft_n_accepted"] = round(tokens - steps)
            counters["drafted"] += timings["draft_n"]
            counters["accepted"] += timings["draft_n_accepted"]
        counters["tokens"] += tokens
        counters["seconds"] += tokens / rate
        return {"choices": [{"message": {"role": "assistant", "content": "a" * tokens}}], "timings": timings}

    class Handler(BaseHTTPRequestHandler):
        def _json(self, status: int, doc: dict[str, Any]) -> None:
            body = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            if time.time() < ready_at:
                self._json(503, {"error": {"message": "Loading model", "code": 503}})
            elif self.path == "/v1/chat/completions":
                self._json(200, chat(body))
            else:
                self.send_error(404)

        def do_GET(self) -> None:
            if self.path == "/metrics" and time.time() >= ready_at:
                # llama-server's names (tools/server: --metrics), the counters the guard reads.
                text = "".join(
                    f"llamacpp:{name} {value}\n"
                    for name, value in (
                        ("tokens_predicted_total", counters["tokens"]),
                        ("tokens_predicted_seconds_total", counters["seconds"]),
                        ("spec_decode_num_draft_tokens_total", counters["drafted"]),
                        ("spec_decode_num_accepted_tokens_total", counters["accepted"]),
                    )
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(text)))
                self.end_headers()
                self.wfile.write(text)
                return
            if self.path not in ("/health", "/v1/health"):
                self.send_error(404)
                return
            if time.time() < ready_at:
                body = b'{"error":{"message":"Loading model","type":"unavailable_error","code":503}}'
                self.send_response(503)
            else:
                body = b'{"status":"ok"}'
                self.send_response(200)
                note_healthy()
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    # The previous container process may still hold the port for a moment after its SIGTERM.
    for _ in range(BIND_ATTEMPTS):
        try:
            server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
            break
        except OSError:
            time.sleep(BIND_RETRY_S)
    else:
        print(f"error: could not bind port {args.port}", flush=True)
        return 1
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(f"main: server is listening on http://127.0.0.1:{args.port}", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
