// Starts `pagedserve serve` on a free port for a test file and stops it afterwards.
// PAGEDSERVE_BINARY and PAGEDSERVE_SHARED_DIR come from CTest (tests/CMakeLists.txt); run by
// hand: PAGEDSERVE_BINARY=build/bin/pagedserve PAGEDSERVE_SHARED_DIR=../shared node --test
import { spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));

// The OpenAI SDK wants a global File (Node 20+); Debian 12's Node 18 has it in node:buffer.
globalThis.File ??= (await import('node:buffer')).File;

export function sharedDir() {
  return process.env.PAGEDSERVE_SHARED_DIR ?? path.resolve(here, '../../../shared');
}

export async function startServer(extraArgs = []) {
  const binary = process.env.PAGEDSERVE_BINARY ?? path.resolve(here, '../../build/bin/pagedserve');
  const model = path.join(sharedDir(), 'models', 'stories260K');
  const child = spawn(binary, ['serve', '--model', model, '--port', '0', ...extraArgs], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let log = '';
  const { scheme, port } = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`server did not start:\n${log}`)), 60000);
    child.stderr.on('data', (chunk) => {
      log += chunk.toString();
      const match = log.match(/on (https?):\/\/[^:]+:(\d+)/);
      if (match) {
        clearTimeout(timer);
        resolve({ scheme: match[1], port: Number(match[2]) });
      }
    });
    child.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`server exited with ${code}:\n${log}`));
    });
  });
  return {
    baseURL: `${scheme}://127.0.0.1:${port}/v1`,
    port,
    log: () => log,
    async stop() {
      if (child.exitCode !== null) return;
      const exited = new Promise((resolve) => child.on('exit', resolve));
      child.kill('SIGTERM');
      await exited;
    },
  };
}
