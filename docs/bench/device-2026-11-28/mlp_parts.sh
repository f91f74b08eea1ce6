# on the device machine, from the repository root, after building (see run.sh):
#   python3 docs/bench/device-2026-11-28/mlp_parts.py 16       # kernels at torch's 16 threads
#   python3 docs/bench/device-2026-11-28/mlp_parts.py 16 4     # cdynamo.config.num_threads = 4
#   python3 docs/bench/device-2026-11-28/mlp_parts.py 16 1
# prints, per graph, (name, eager us, cdynamo us) and cdynamo.stats()
