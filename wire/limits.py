"""Size limits applied on decode, set on purpose so that hostile input allocates nothing large."""

VERSION = 1

MAX_HEADER_BYTES = 1 << 20          # frame 0: the msgpack header
MAX_FRAMES = 64                     # header + tensor payload frames
MAX_TENSOR_BYTES = 1 << 30          # one payload frame
MAX_TENSOR_DIMS = 6
MAX_DEPTH = 32                      # nesting of maps and lists inside a header (a tool's JSON schema)
MAX_STR = 1 << 20
MAX_LIST = 1 << 20
