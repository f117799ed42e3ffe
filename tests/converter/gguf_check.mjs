// Independent check that Kiln model files are standard GGUF: parses every *.kiln in DIR with
// @huggingface/gguf and compares tensor names, shapes, types and offsets (and key metadata) with the
// listing Kiln's own reader wrote next to it (X.kiln.json, from test_converter "[.gguf_dump]").
// Usage: node gguf_check.mjs DIR
import { readdirSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

// The package is installed in tests/converter/node/ (package.json there); resolve it from that folder.
const here = dirname(fileURLToPath(import.meta.url));
const { gguf, GGMLQuantizationType } = createRequire(join(here, "node", "package.json"))("@huggingface/gguf");

const dir = process.argv[2];
if (!dir) {
  console.error("usage: node gguf_check.mjs DIR");
  process.exit(2);
}
let files = 0, tensors = 0, failures = 0;
const kinds = new Set();
const fail = (file, msg) => { console.error(`FAIL ${file}: ${msg}`); failures++; };

for (const name of readdirSync(dir).filter((f) => f.endsWith(".kiln")).sort()) {
  const path = join(dir, name);
  const ours = JSON.parse(readFileSync(path + ".json", "utf8"));
  const { metadata, tensorInfos, tensorDataOffset } = await gguf(path, { allowLocalFile: true });
  files++;
  if (metadata.version !== 3) fail(name, `version ${metadata.version}`);
  if (Number(metadata.tensor_count) !== ours.tensors.length) fail(name, `tensor_count ${metadata.tensor_count}`);
  if (Number(tensorDataOffset) !== ours.data_offset) fail(name, `data offset ${tensorDataOffset} vs ${ours.data_offset}`);
  for (const [k, v] of Object.entries(ours.metadata)) {
    if (JSON.stringify(metadata[k]) !== JSON.stringify(v)) fail(name, `metadata ${k}: ${JSON.stringify(metadata[k])} vs ${JSON.stringify(v)}`);
  }
  if (tensorInfos.length !== ours.tensors.length) { fail(name, "tensor count differs"); continue; }
  tensorInfos.forEach((t, i) => {
    const o = ours.tensors[i];
    const shape = t.shape.map(Number).reverse();  // GGUF dims are innermost first
    if (t.name !== o.name) fail(name, `tensor #${i} name ${t.name} vs ${o.name}`);
    if (JSON.stringify(shape) !== JSON.stringify(o.shape)) fail(name, `${o.name} shape ${shape} vs ${o.shape}`);
    if (t.dtype !== o.ggml_type) fail(name, `${o.name} type ${t.dtype} vs ${o.ggml_type}`);
    // The package's own id -> name table (Q4_0=2 ... Q6_K=14) must name the type as Kiln does.
    if (GGMLQuantizationType[t.dtype] !== o.ggml_name) fail(name, `${o.name} type name ${GGMLQuantizationType[t.dtype]} vs ${o.ggml_name}`);
    if (Number(tensorDataOffset + t.offset) !== o.offset) fail(name, `${o.name} offset ${tensorDataOffset + t.offset} vs ${o.offset}`);
    if (Number(t.offset) % Number(metadata["general.alignment"]) !== 0) fail(name, `${o.name} offset not aligned`);
    kinds.add(o.ggml_name);
    tensors++;
  });
}
if (files === 0) fail(dir, "no .kiln files");
for (const q of ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q6_K"]) if (!kinds.has(q)) fail(dir, `no ${q} tensor checked`);
console.log(`gguf_check: ${files} files, ${tensors} tensors (${[...kinds].sort().join(" ")}) checked with @huggingface/gguf, ${failures} failures`);
process.exit(failures ? 1 : 0);
