// kiln serve through the official OpenAI client (npm `openai`): each image it returns equals the PNG `kiln generate`
// writes for the same model, seed and settings, byte for byte once kiln generate's tEXt chunks (its settings) are
// dropped: both encode the same RGB pixels with the same encoder, so equal bytes mean equal pixels.
//   node openai_check.mjs KILN_BINARY DIGITS_MODEL TEXT_MODEL TMPDIR
import { spawn, execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { createInterface } from "node:readline";
import OpenAI from "openai";

const [kiln, digits, text, tmp] = process.argv.slice(2);

// The PNG without its tEXt chunks (8-byte signature, then length, type, data, CRC per chunk).
function withoutText(png) {
  const parts = [png.subarray(0, 8)];
  for (let at = 8; at < png.length; ) {
    const len = png.readUInt32BE(at), type = png.toString("latin1", at + 4, at + 8), end = at + 12 + len;
    if (type !== "tEXt") parts.push(png.subarray(at, end));
    at = end;
  }
  return Buffer.concat(parts);
}

// `kiln serve --port 0`: resolves with the child and the port its first line names.
function serve(model) {
  const child = spawn(kiln, ["serve", "--model", model, "--port", "0", "--api-key", "test-key"],
                      { stdio: ["ignore", "pipe", "inherit"] });
  return new Promise((resolve, reject) => {
    createInterface({ input: child.stdout }).once("line", (line) => {
      const m = / on http:\/\/127\.0\.0\.1:(\d+) /.exec(line);
      m ? resolve({ child, port: Number(m[1]) }) : reject(new Error("kiln serve said: " + line));
    });
    child.once("exit", (code) => reject(new Error("kiln serve exited with " + code)));
  });
}

let failures = 0, passes = 0;
async function check(model, cases) {
  const { child, port } = await serve(model);
  try {
    const client = new OpenAI({ apiKey: "test-key", baseURL: `http://127.0.0.1:${port}/v1`, maxRetries: 0,
                                timeout: 600_000 });
    const models = await client.models.list();
    const id = models.data[0].id;
    for (const c of cases) {
      const res = await client.images.generate({ model: id, prompt: c.prompt, n: 1, response_format: "b64_json",
                                                 seed: c.seed, steps: c.steps });
      const served = Buffer.from(res.data[0].b64_json, "base64");
      const out = join(tmp, `ref_${id}_${c.seed}.png`);
      execFileSync(kiln, ["generate", "--model", model, ...c.cli, "--seed", String(c.seed), "--steps",
                          String(c.steps), "-o", out], { stdio: ["ignore", "ignore", "inherit"] });
      const ok = withoutText(readFileSync(out)).equals(served);
      console.log(`${ok ? "ok" : "FAILED"}: ${id} prompt ${JSON.stringify(c.prompt)} seed ${c.seed}: ` +
                  `${served.length} PNG bytes ${ok ? "equal" : "differ from"} kiln generate's`);
      ok ? passes++ : failures++;
    }
  } finally {
    child.kill("SIGTERM");
  }
}

await check(digits, [{ prompt: "3", cli: ["--class-labels", "3"], seed: 7, steps: 10 },
                     { prompt: "8", cli: ["--class-labels", "8"], seed: 42, steps: 25 }]);
await check(text, [{ prompt: "a red cube", cli: ["--prompt", "a red cube"], seed: 5, steps: 2 }]);
console.log(`${passes} passed, ${failures} failed`);
process.exit(failures === 0 && passes === 3 ? 0 : 1);
