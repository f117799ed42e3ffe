#!/usr/bin/env python3
"""Writes a synthetic FLUX.1-dev transformer as city96 publishes it (flux1-dev-Q4_K_S.gguf's layout): BFL tensor
names, general.architecture "flux", block weights Q4_K, embedders and final_layer F16, 1-D tensors F32, data aligned
to 32 bytes. The values are one valid block repeated (d = dmin = 2^-10, mid-range nibbles): for measuring how Kiln
opens, checks and reads a file of the real size and layout, not for images.

    scripts/synthetic_flux_gguf.py OUT.gguf [--blocks DOUBLE SINGLE]
"""
import struct
import sys

D, MLP, HEAD = 3072, 12288, 128
F32, F16, Q4_K = 0, 1, 12
BLOCK_BYTES = {F32: 4, F16: 2, Q4_K: 144}  # per element (F32, F16) or per 256-value block (Q4_K)


def tensors(n_double, n_single):
    t = []
    def lin(name, out, inp, ty=Q4_K, bias=True):
        t.append((name + ".weight", [out, inp], ty))
        if bias:
            t.append((name + ".bias", [out], F32))
    for e, inp in (("img_in", 64), ("txt_in", 4096)):
        lin(e, D, inp, F16)
    for e, inp in (("time_in", 256), ("vector_in", 768), ("guidance_in", 256)):
        lin(e + ".in_layer", D, inp, F16)
        lin(e + ".out_layer", D, D, F16)
    for i in range(n_double):
        for s in ("img", "txt"):
            p = "double_blocks.%d.%s_" % (i, s)
            lin(p + "mod.lin", 6 * D, D)
            lin(p + "attn.qkv", 3 * D, D)
            lin(p + "attn.proj", D, D)
            lin(p + "mlp.0", MLP, D)
            lin(p + "mlp.2", D, MLP)
            for n in ("query_norm", "key_norm"):
                t.append((p + "attn.norm.%s.scale" % n, [HEAD], F32))
    for i in range(n_single):
        p = "single_blocks.%d." % i
        lin(p + "linear1", 3 * D + MLP, D)
        lin(p + "linear2", D, D + MLP)
        lin(p + "modulation.lin", 3 * D, D)
        for n in ("query_norm", "key_norm"):
            t.append((p + "norm.%s.scale" % n, [HEAD], F32))
    lin("final_layer.linear", 64, D, F16)
    lin("final_layer.adaLN_modulation.1", 2 * D, D, F16)
    return sorted(t)


def nbytes(shape, ty):
    n = 1
    for s in shape:
        n *= s
    return n // 256 * 144 if ty == Q4_K else n * BLOCK_BYTES[ty]


def gguf_string(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def main():
    args = sys.argv[1:]
    if not args:
        sys.exit(__doc__)
    out, n_double, n_single = args[0], 19, 38
    if "--blocks" in args:
        k = args.index("--blocks")
        n_double, n_single = int(args[k + 1]), int(args[k + 2])
    ts = tensors(n_double, n_single)
    kv = [("general.architecture", 8, gguf_string("flux")), ("general.quantization_version", 4, struct.pack("<I", 2)),
          ("general.file_type", 4, struct.pack("<I", 14))]
    head = b"GGUF" + struct.pack("<IQQ", 3, len(ts), len(kv))
    for k, ty, v in kv:
        head += gguf_string(k) + struct.pack("<I", ty) + v
    off = 0
    for name, shape, ty in ts:
        head += gguf_string(name) + struct.pack("<I", len(shape))
        head += b"".join(struct.pack("<Q", s) for s in reversed(shape)) + struct.pack("<IQ", ty, off)
        off += (nbytes(shape, ty) + 31) // 32 * 32
    head += b"\0" * ((32 - len(head) % 32) % 32)
    # f16 2^-10 = 0x1400; Q4_K: d, dmin, 12 scale bytes (6-bit scale 1, min 0), 128 bytes of nibbles 8.
    q4k = struct.pack("<HH", 0x1400, 0x1400) + bytes([1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1]) + bytes([0x88]) * 128
    chunk = {Q4_K: q4k * 4096, F16: struct.pack("<H", 0x1400) * (1 << 20), F32: struct.pack("<f", 1.0) * (1 << 19)}
    with open(out, "wb") as f:
        f.write(head)
        for name, shape, ty in ts:
            n = nbytes(shape, ty)
            c = chunk[ty]
            while n > 0:
                f.write(c[:min(n, len(c))])
                n -= min(n, len(c))
            f.write(b"\0" * ((32 - f.tell() % 32) % 32))
    print("%s: %d tensors, %.2f GiB" % (out, len(ts), (len(head) + off) / 2**30))


main()
