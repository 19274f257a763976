// Runs a wasm32-wasip1 test binary under Node's WASI (cargo's target runner for `make wasm-unit`):
// cargo calls it as `node scripts/wasi-run.mjs BINARY.wasm ARGS...`.
import { readFile } from "node:fs/promises";
import { WASI } from "node:wasi";
import { argv, env, exit } from "node:process";

const [file, ...args] = argv.slice(2);
const wasi = new WASI({ version: "preview1", args: [file, ...args], env, returnOnExit: true });
const module = await WebAssembly.compile(await readFile(file));
// The filter's proxy-wasm imports (module "env") are linked in but never called by a unit test:
// each is a function that fails loudly if one ever is.
const imports = wasi.getImportObject();
for (const { module: from, name, kind } of WebAssembly.Module.imports(module)) {
  if (from === "wasi_snapshot_preview1" || kind !== "function") continue;
  imports[from] ??= {};
  imports[from][name] = () => {
    throw new Error(`host function ${from}.${name} called in a unit test`);
  };
}
const instance = await WebAssembly.instantiate(module, imports);
// The filter's build also exports proxy-wasm's `_initialize` (a reactor's), which Node's `start` refuses
// beside `_start`: the test binary is started as the command it is.
const { _start, memory } = instance.exports;
let code;
try {
  code = wasi.start({ exports: { _start, memory } });
} catch (e) {
  // A failed assertion aborts the whole binary (panic=abort on wasm): its message is on stderr.
  console.error(`wasi-run: ${file} trapped: ${e.message}`);
  code = 101;
}
exit(code);
