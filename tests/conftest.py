import os

# One thread unless OMP_NUM_THREADS says otherwise: the suite must pass with 1 and with 2 threads
# (`OMP_NUM_THREADS=2 python -m pytest`), so float results are never compared bit for bit.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

torch.set_num_threads(max(1, int(os.environ["OMP_NUM_THREADS"] or 1)))
