/**
 * Argument validation: messages, standard formats, unknown formats, schemas that cannot compile, and
 * the call signatures quoted in error observations.
 */
import { expect, it } from "vitest";
import { signature, validateArguments } from "../../src/tools/validate.js";

it("checks standard formats and ignores unknown ones", () => {
  const schema = { type: "object", properties: { d: { type: "string", format: "date" }, n: { type: "integer", format: "int64" }, p: { type: "string", format: "phone" } } };
  expect(validateArguments(schema, { d: "2024-13-45", n: 1, p: "x" })).toEqual({ ok: false, message: 'argument d: must match format "date"' });
  expect(validateArguments(schema, { d: "2024-01-05", n: 1, p: "x" })).toEqual({ ok: true });
});

it("says what is missing, unexpected or out of the enum, several at once", () => {
  const schema = { type: "object", properties: { a: { type: "string", enum: ["x", "y"] }, b: { type: "number" } }, required: ["b"], additionalProperties: false };
  expect(validateArguments(schema, { a: "z", c: 1 })).toEqual({
    ok: false,
    message: 'arguments: missing required property "b"; arguments: unexpected property "c"; argument a: must be one of ["x","y"]',
  });
});

it("does not throw on a schema the validator cannot compile", () => {
  const broken = { type: "object", properties: { a: { $ref: "#/nowhere" } } };
  expect(validateArguments(broken, { a: 1 })).toEqual({ ok: true });
});

it("writes short call signatures", () => {
  expect(
    signature("find", {
      type: "object",
      properties: { q: { type: "string" }, kind: { enum: ["a", "b"] }, ids: { type: "array", items: { type: "integer" } }, v: { anyOf: [{ type: "string" }, { type: "null" }] } },
      required: ["q"],
    }),
  ).toBe('find({q: string, kind?: "a" | "b", ids?: integer[], v?: string | null})');
  expect(signature("many", { type: "object", properties: Object.fromEntries(Array.from({ length: 50 }, (_, i) => [`p${i}`, { type: "string" }])) })).toHaveLength(300);
});

it("refuses a value nested too deeply to check, instead of throwing", () => {
  const tree = { $defs: { t: { type: "array", items: { $ref: "#/$defs/t" } } }, type: "object", properties: { a: { $ref: "#/$defs/t" } } };
  const deep = JSON.parse(`{"a":${"[".repeat(200_000)}${"]".repeat(200_000)}}`);
  expect(validateArguments(tree, deep)).toMatchObject({ ok: false, message: expect.stringMatching(/^arguments could not be checked \(Maximum call stack size exceeded\)/) });
  expect(validateArguments(tree, { a: [[[]]] })).toEqual({ ok: true });
});
