#!/usr/bin/env python3
"""docs/gpu.md shows tests/runtime/device_example.c verbatim (the first
```c block after the heading "Embedding with the device backend"): the
example users copy is the one CI compiles and runs on the emulated device."""
import sys

doc, src = (open(p, encoding="utf-8").read() for p in sys.argv[1:3])
part = doc.split("## Embedding with the device backend", 1)
if len(part) != 2 or "```c\n" not in part[1]:
    sys.exit("docs/gpu.md: no ```c block after '## Embedding with the device backend'")
block = part[1].split("```c\n", 1)[1].split("```", 1)[0]
if block != src:
    sys.exit("docs/gpu.md: the example differs from tests/runtime/device_example.c")
if src.count("\n") > 60:
    sys.exit(f"tests/runtime/device_example.c: {src.count(chr(10))} lines > 60")
print("docs/gpu.md example == tests/runtime/device_example.c")
