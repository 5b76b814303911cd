import { createServer } from 'node:http';
import { readFileSync } from 'node:fs';
import puppeteer from 'puppeteer-core';
const sdk = readFileSync('/work/main/ingest/sdk/vigil.js');
let resolveReport;
const server = createServer((req, res) => {
  if (req.url === '/sdk.js') { res.setHeader('content-type', 'application/javascript'); return res.end(sdk); }
  if (req.url === '/report') { let b = ''; req.on('data', (c) => b += c); req.on('end', () => { res.end(); resolveReport(JSON.parse(b)); }); return; }
  res.setHeader('content-type', 'text/html');
  res.end(`<!doctype html><html><head><script src="/sdk.js"></script></head><body><script>
  const RENDER = ${JSON.stringify(`
    function render(gl) {
      const V = 'attribute vec2 p;attribute vec3 c;varying vec3 v;void main(){v=c;gl_Position=vec4(p,0.0,1.0);}';
      const F = 'precision mediump float;varying vec3 v;void main(){gl_FragColor=vec4(v*sin(v*9.0)+0.2,1.0);}';
      const compile = (t, s) => { const sh = gl.createShader(t); gl.shaderSource(sh, s); gl.compileShader(sh); return sh; };
      const program = gl.createProgram(); gl.attachShader(program, compile(gl.VERTEX_SHADER, V)); gl.attachShader(program, compile(gl.FRAGMENT_SHADER, F)); gl.linkProgram(program); gl.useProgram(program);
      const vertices = new Float32Array([-0.9,-0.8,1.0,0.1,0.3,0.85,-0.6,0.2,0.9,0.1,-0.2,0.95,0.3,0.2,1.0,-0.7,0.7,0.9,0.8,0.0,0.6,0.55,0.0,0.5,0.7,0.1,-0.85,0.4,0.8,0.9]);
      gl.bindBuffer(gl.ARRAY_BUFFER, gl.createBuffer()); gl.bufferData(gl.ARRAY_BUFFER, vertices, gl.STATIC_DRAW);
      const p = gl.getAttribLocation(program, 'p'); const c = gl.getAttribLocation(program, 'c');
      gl.enableVertexAttribArray(p); gl.vertexAttribPointer(p, 2, gl.FLOAT, false, 20, 0); gl.enableVertexAttribArray(c); gl.vertexAttribPointer(c, 3, gl.FLOAT, false, 20, 8);
      gl.viewport(0, 0, gl.drawingBufferWidth, gl.drawingBufferHeight); gl.clearColor(0.05, 0.1, 0.15, 1); gl.clear(gl.COLOR_BUFFER_BIT); gl.drawArrays(gl.TRIANGLES, 0, 6);
      const px = new Uint8Array(gl.drawingBufferWidth * gl.drawingBufferHeight * 4); gl.readPixels(0, 0, gl.drawingBufferWidth, gl.drawingBufferHeight, gl.RGBA, gl.UNSIGNED_BYTE, px);
      return crypto.subtle.digest('SHA-256', px).then((d) => Array.from(new Uint8Array(d)).map((b) => b.toString(16).padStart(2, '0')).join(''));
    }`)};
  (async () => {
    const probe = Vigil._internal.PROBES.find((p) => p.name === 'webgl_render');
    const r = await Vigil._internal.collectProbes([probe], 2000);
    const page = r.observations.rendering.webgl_hash;
    const w = new Worker(URL.createObjectURL(new Blob([RENDER + '; render(new OffscreenCanvas(64, 64).getContext("webgl")).then((h) => postMessage(h));'])));
    const worker = await new Promise((res) => { w.onmessage = (e) => res(e.data); });
    fetch('/report', { method: 'POST', body: JSON.stringify({ page, worker }) });
  })();
  </script></body></html>`);
});
await new Promise((r) => server.listen(0, '127.0.0.1', r));
for (const headless of [true, false]) {
  const browser = await puppeteer.launch({ executablePath: '/usr/bin/chromium', headless, args: ['--no-sandbox', '--enable-unsafe-swiftshader', '--disable-background-networking'], env: { ...process.env, DISPLAY: process.env.DISPLAY || '' } });
  const page = await browser.newPage();
  const reported = new Promise((r) => { resolveReport = r; });
  await page.goto(`http://127.0.0.1:${server.address().port}/`);
  console.log(headless ? 'headless' : 'headful', JSON.stringify(await reported));
  await browser.close();
  if (!process.env.DISPLAY) break;
}
server.close();
