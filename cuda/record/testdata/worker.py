"""Test worker of launcher.py: worker I allocates 3+2*I blocks of
1000*(I+1)+J bytes (J the block's index) on device I and frees the first
two, so that each worker's trace tells which worker made it. With
LAUNCHER_NOWAIT=DIR it makes the file DIR/I once it imported torch (and so
records), then sleeps half a second before it allocates."""
import os
import sys
import time

import torch

i = int(sys.argv[1])
if os.environ.get("LAUNCHER_NOWAIT"):
    open(os.path.join(os.environ["LAUNCHER_NOWAIT"], str(i)), "w").close()
    time.sleep(0.5)
ptrs = [(torch.cuda.alloc(1000 * (i + 1) + j, 0, i), 1000 * (i + 1) + j) for j in range(3 + 2 * i)]
for p, n in ptrs[:2]:
    torch.cuda.free(p, n, 0, i)
