"""Print the include directories (separated by ';') that hold cupti.h, cuda.h and crt/.

Looked for in NVIDIA's wheels (the nvidia.* namespace package, CUDA 13 layout nvidia/cu13 or
CUDA 12 layout nvidia/cuda_cupti, nvidia/cuda_runtime, nvidia/cuda_nvcc), then CUDA_HOME.
"""
import os
import sys
from pathlib import Path

NEEDED = ("cupti.h", "cuda.h", "crt/host_defines.h")


def candidates():
    try:
        import nvidia  # namespace package provided by the nvidia-* wheels
        for root in nvidia.__path__:
            root = Path(root)
            yield from root.glob("cu*/include")
            yield from root.glob("cuda_*/include")
    except ImportError:
        pass
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            home = Path(os.environ[var])
            yield home / "include"
            yield home / "extras" / "CUPTI" / "include"


def main() -> int:
    found = {}
    for directory in candidates():
        for header in NEEDED:
            if header not in found and (directory / header).is_file():
                found[header] = str(directory)
    missing = [h for h in NEEDED if h not in found]
    if missing:
        print("missing: " + ", ".join(missing), file=sys.stderr)
        return 1
    print(";".join(dict.fromkeys(found.values())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
