// A driver patched against DevTools detection (rebrowser-puppeteer-core or patchright-core),
// headful under Xvfb with the window's own viewport, approving a Gate consent page as a careful
// operator would: the user code typed through the driver's keyboard with a person's rhythm, and
// Approve pressed, by a curved path of the driver's mouse or by Tab and Enter alone. Prints one
// JSON line: the text of the page the browser ends on.
//
//   node consent.mjs --url 'http://127.0.0.1:8080/gate/consent/gate_…?token=gtc_…' \
//       --code WDJB-MJHT --driver rebrowser --input whole_pixels [--tabs 4] [--position 0,0]
//
// `--input` is `careful`, `whole_pixels` (every position rounded to a whole pixel) or `keyboard`
// (`--tabs` Tab presses reach the code field, one more the button). The Gate tests
// (`tests/it/gate_approvals.rs`) run it, and Vigil must refuse it.

import { randomInt } from 'node:crypto';

import { sleep, startXvfb } from './desktop.mjs';
import { carefulInput, carefulKeyboardInput, patchedPage } from './drive.mjs';

function parseArgs(argv) {
  const out = {};
  for (let i = 0; i < argv.length; i += 2) out[argv[i].replace(/^--/, '')] = argv[i + 1];
  return out;
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  if (!args.url || !args.code || !['rebrowser', 'patchright'].includes(args.driver)) {
    throw new Error('usage: consent.mjs --url URL --code CODE --driver rebrowser|patchright --input careful|whole_pixels|keyboard');
  }
  const xvfb = await startXvfb();
  const timeout = setTimeout(() => {
    console.error('consent.mjs: no outcome within 60 s');
    process.exit(2);
  }, 60000);
  const { page, close } = await patchedPage(args.driver, { display: xvfb.display, position: args.position });
  try {
    await page.goto(args.url);
    // The SDK loads and runs its probes while the operator's script "reads" the page.
    await sleep(2500);
    const text = args.code.toLowerCase();
    // An operator's script does not send the same input twice: each run draws its own, so the
    // runs of one test are not copies of each other (which Vigil's replay record would catch,
    // hiding what the run tests). The seed is in the printed line; `--seed N` repeats a run.
    const seed = args.seed === undefined ? randomInt(2 ** 32) : Number(args.seed);
    if (args.input === 'keyboard') {
      await carefulKeyboardInput(page, { tabs: Number(args.tabs || 1), text, seed });
      await sleep(300);
      await page.keyboard.down('Tab');
      await sleep(90);
      await page.keyboard.up('Tab');
      await sleep(400);
      await page.keyboard.down('Enter');
      await sleep(80);
      await page.keyboard.up('Enter');
    } else {
      await carefulInput(page, {
        wholePixels: args.input === 'whole_pixels', field: '#user-code', text, button: 'button.approve', seed,
      });
    }
    // The check answers, the form posts, and the outcome's page loads.
    let shown = '';
    for (let i = 0; i < 60; i++) {
      await sleep(500);
      try {
        shown = await page.content();
      } catch (_) { continue; /* navigating */ }
      if (!shown.includes('button class="approve"') && !shown.includes('Checking this browser')) break;
    }
    clearTimeout(timeout);
    console.log(JSON.stringify({ text: shown.replace(/<[^>]*>/g, ' '), seed }));
  } finally {
    try {
      await close();
    } finally {
      xvfb.stop();
    }
  }
}

main().then(() => process.exit(), (e) => {
  console.error(e && e.stack ? e.stack : String(e));
  process.exit(1);
});
