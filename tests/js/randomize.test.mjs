// Unit tests of the JavaScript randomizer (node --test tests/js/); the statistical tests and the
// comparison with the Python randomizers are driven from tests/unit/test_local_js.py.
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  ByteStream,
  bernoulliExp,
  makeRandomizer,
  parseEpsilon,
  randomize,
  uniform,
  VERSION,
} from "../../dprelease/local/randomize.js";

function bytesOf(list) {
  let position = 0;
  return (n) => {
    const out = new Uint8Array(n);
    for (let i = 0; i < n; i++) out[i] = position < list.length ? list[position++] : 0;
    return out;
  };
}

test("epsilon is read exactly, in lowest terms", () => {
  assert.deepEqual(parseEpsilon("1"), { num: 1n, den: 1n });
  assert.deepEqual(parseEpsilon("0.50"), { num: 1n, den: 2n });
  assert.deepEqual(parseEpsilon("2/6"), { num: 1n, den: 3n });
  assert.deepEqual(parseEpsilon(0.25), { num: 1n, den: 4n });
  for (const bad of ["0", "-1", "abc", "", "1/0", "."]) {
    assert.throws(() => parseEpsilon(bad), RangeError, bad);
  }
});

test("uniform reads the documented bytes: low bits, little-endian, rejected from m up", () => {
  // m = 6: 3 bits a byte; 0xff -> 7 is rejected, 0x05 -> 5 is kept
  assert.equal(uniform(new ByteStream(bytesOf([0xff, 0x05])), 6n), 5n);
  // m = 1000: 10 bits of 2 bytes; [0xe8, 0x03] -> 1000 is rejected, [0x01, 0x00] -> 1
  assert.equal(uniform(new ByteStream(bytesOf([0xe8, 0x03, 0x01, 0x00])), 1000n), 1n);
  // m = 1 reads nothing
  const stream = new ByteStream(bytesOf([9]));
  assert.equal(uniform(stream, 1n), 0n);
  assert.equal(uniform(stream, 256n), 9n);
});

test("Bernoulli(exp(-0)) is always true and reads nothing", () => {
  const stream = new ByteStream(bytesOf([]));
  for (let i = 0; i < 10; i++) assert.equal(bernoulliExp(stream, { num: 0n, den: 1n }), true);
});

test("the frequency of Bernoulli(exp(-1/2)) is close to its probability", () => {
  const stream = new ByteStream();
  let ones = 0;
  const n = 40000;
  for (let i = 0; i < n; i++) ones += bernoulliExp(stream, { num: 1n, den: 2n }) ? 1 : 0;
  const p = Math.exp(-0.5);
  const sd = Math.sqrt(p * (1 - p) / n);
  assert.ok(Math.abs(ones / n - p) < 5 * sd, `${ones / n} vs ${p}`); // false alarm ~6e-7
});

test("reports have each protocol's form", () => {
  const domain = ["never", "once", "monthly", "weekly"];
  const krr = randomize("once", { mechanism: "krr", epsilon: "1", domain });
  assert.ok(domain.includes(krr));
  const oue = randomize("once", { mechanism: "oue", epsilon: "1", domain });
  assert.match(oue, /^[01]{4}$/);
  const olh = randomize("once", { mechanism: "olh", epsilon: "1", domain, g: 4 });
  const [a, b, y] = olh.split(":").map(BigInt);
  assert.ok(a >= 1n && a < 2147483647n && b >= 0n && b < 2147483647n && y >= 0n && y < 4n);
});

test("an answer is matched with its type: 1 is not true, nor '1'", () => {
  const config = { mechanism: "krr", epsilon: "1", domain: [1, 2] };
  assert.throws(() => randomize(true, config), /not in the domain/);
  assert.throws(() => randomize("1", config), /not in the domain/);
  assert.ok([1, 2].includes(randomize(1, config)));
});

test("a bad configuration is refused before any answer", () => {
  const domain = ["a", "b"];
  const bad = [
    { mechanism: "rappor", epsilon: "1", domain },
    { mechanism: "krr", epsilon: "1", domain: ["a"] },
    { mechanism: "krr", epsilon: "1", domain: ["a", "a"] },
    { mechanism: "krr", epsilon: "1", domain, g: 3 },
    { mechanism: "olh", epsilon: "1", domain },
    { mechanism: "olh", epsilon: "1", domain, g: 1 },
    { mechanism: "krr", epsilon: "0", domain },
    { mechanism: "krr", epsilon: "1", domain, version: "dprelease-local/0" },
  ];
  for (const config of bad) {
    assert.throws(() => makeRandomizer(config), RangeError, JSON.stringify(config));
  }
  assert.equal(makeRandomizer({ mechanism: "krr", epsilon: "1", domain, version: VERSION }).config.version, VERSION);
});

test("the same bytes give the same reports", () => {
  const config = { mechanism: "olh", epsilon: "5/2", domain: [0, 1, 2, 3, 4], g: 13 };
  const bytes = Array.from({ length: 4096 }, (_, i) => (i * 2654435761) % 251);
  const first = makeRandomizer(config, { bytes: bytesOf(bytes) });
  const second = makeRandomizer(config, { bytes: bytesOf(bytes) });
  const answers = [0, 1, 2, 3, 4, 0, 1];
  assert.deepEqual(answers.map(first.randomize), answers.map(second.randomize));
});
