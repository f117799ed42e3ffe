# Writes a stripped copy of a fixture's io.safetensors: one run's tensors, the run prefix removed, only the names kept.
import json, struct, sys, re
src, dst, prefix = sys.argv[1], sys.argv[2], sys.argv[3]
keep = re.compile(sys.argv[4])
with open(src, 'rb') as f:
    n = struct.unpack('<Q', f.read(8))[0]
    hdr = json.loads(f.read(n))
    base = 8 + n
    out_hdr, blobs, off = {}, [], 0
    for name, meta in sorted(hdr.items(), key=lambda kv: kv[1]['data_offsets'][0] if kv[0] != '__metadata__' else -1):
        if name == '__metadata__' or not name.startswith(prefix): continue
        short = name[len(prefix):]
        if not keep.fullmatch(short): continue
        a, b = meta['data_offsets']
        f.seek(base + a); data = f.read(b - a)
        out_hdr[short] = {'dtype': meta['dtype'], 'shape': meta['shape'], 'data_offsets': [off, off + len(data)]}
        blobs.append(data); off += len(data)
h = json.dumps(out_hdr, separators=(',', ':')).encode()
h += b' ' * ((8 - len(h) % 8) % 8)
with open(dst, 'wb') as f:
    f.write(struct.pack('<Q', len(h))); f.write(h)
    for b in blobs: f.write(b)
print(dst, off + len(h) + 8, sorted(out_hdr))
