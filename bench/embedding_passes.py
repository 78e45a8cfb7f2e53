"""CPU per text of the MiniLM embedder when a call holds texts of unlike length.

The service embeds concurrent writes (and bulk ingests) in one call. The previous embedder sorted
a call's texts by length and cut them into passes of 32, each padded to its longest text; the
current one chooses the passes by length (``onnx_minilm.passes``). Both run here on the same
random batches of LoCoMo turns and questions, beside one pass per text, one thread, process CPU.
Passes of several texts are for the fp32 arithmetic; the last columns are the int8 default, which
runs one text a pass (its activations are scaled per pass), against fp32 passes by length:

    .venv/bin/python -m bench.embedding_passes [--data PATH] [--rounds 256]
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from bench.locomo.run import DEFAULT_DATA, load
from cluster.embedding import OnnxMiniLMEmbedder


def fixed_passes(embedder: OnnxMiniLMEmbedder, texts: Sequence[str], size: int = 32) -> None:
    """The previous way: sorted by length, passes of ``size``, each padded to its longest."""
    session, tokenizer = embedder._ensure_loaded()
    encodings = tokenizer.encode_batch(list(texts))
    order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
    for start in range(0, len(order), size):
        embedder._forward(session, [encodings[i] for i in order[start : start + size]])


def cpu_ms_per_text(run: Callable[[Sequence[str]], object], batches: list[list[str]]) -> float:
    started = time.process_time()
    for batch in batches:
        run(batch)
    return 1000 * (time.process_time() - started) / sum(len(b) for b in batches)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--rounds", type=int, default=256, help="texts per row and method")
    args = parser.parse_args()
    conversations = load(args.data)
    pools = {
        "conversation turns": [t.item_text for c in conversations for t in c.turns],
        "questions": [q.question for c in conversations for q in c.questions],
    }
    embedder = OnnxMiniLMEmbedder(threads=1, quantized=False)
    int8 = OnnxMiniLMEmbedder(threads=1)
    embedder.embed(["warm up"])
    int8.embed(["warm up"])
    rng = random.Random(0)
    print(
        "| texts | per call | fp32 one pass per text | fp32 previous: sorted passes of 32 | fp32 passes by length "
        "| gain | int8 (default) | int8 gain over fp32 by length |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, pool in pools.items():
        for size in (4, 8, 16, 32):
            batches = [rng.sample(pool, size) for _ in range(max(4, args.rounds // size))]
            single = cpu_ms_per_text(lambda b: [embedder.embed_array([t]) for t in b], batches)
            before = cpu_ms_per_text(lambda b: fixed_passes(embedder, b), batches)
            after = cpu_ms_per_text(embedder.embed_array, batches)
            quantized = cpu_ms_per_text(int8.embed_array, batches)
            print(
                f"| {name} | {size} | {single:.2f} | {before:.2f} | {after:.2f} | {before / after:.2f}x "
                f"| {quantized:.2f} | {after / quantized:.2f}x |"
            )
    print("(CPU ms per text, one onnxruntime thread)")


if __name__ == "__main__":
    main()
