/**
 * OpenAPI as a tool source: an OpenAPI 3.0 or 3.1 document plus a base URL become tools that call the
 * real HTTP server with `fetch`.
 *
 * Each operation becomes one tool, named by its operationId (or method + path). Its parameter schema
 * gathers the path, query, header and cookie parameters and the JSON request body (an object body's
 * properties are flattened into the arguments when no name clashes, otherwise it is one `body`
 * argument). Local `$ref`s are resolved; enums, required flags, defaults and descriptions are kept, so
 * the agent sees every allowed value (an enum-typed query parameter included). 3.0-only forms
 * (`nullable`, boolean `exclusiveMinimum`) are turned into plain JSON Schema. HTTP errors, bodies that
 * are not the declared JSON, timeouts and an unreachable server become readable errors (status, body
 * excerpt, what to do), which `ToolEnv` shows as error observations. This file does not serve HTTP.
 */
import { readFileSync } from "node:fs";
import { parse as parseYaml } from "yaml";
import type { JsonSchema } from "../gym/index.js";
import type { Tool } from "./tool.js";

export type OpenApiDocument = Record<string, any>;

export interface OpenApiToolsOptions {
  /** Where the server runs, e.g. http://127.0.0.1:8080/api; defaults to the document's first absolute `servers` URL. */
  baseUrl?: string;
  /** Headers sent with every request (authentication, for example). */
  headers?: Record<string, string>;
  /** A request without an answer after this long is abandoned (ms); 10,000 by default. */
  requestTimeoutMs?: number;
  /** Characters of an error body quoted in an error message; 500 by default. */
  errorExcerptChars?: number;
  /** Keeps only the operations this returns true for. */
  include?(operation: { name: string; method: string; path: string; tags: string[] }): boolean;
}

const METHODS = ["get", "put", "post", "delete", "patch", "head", "options", "trace"] as const;
/** OpenAPI-only schema keywords that are not JSON Schema validation keywords. */
const OPENAPI_ONLY = new Set(["discriminator", "xml", "externalDocs", "example", "deprecated", "readOnly", "writeOnly", "nullable"]);

/** Reads an OpenAPI document from a JSON or YAML file. */
export function loadOpenApiDocument(file: string): OpenApiDocument {
  const text = readFileSync(file, "utf8");
  let doc: unknown;
  try {
    doc = file.endsWith(".json") ? JSON.parse(text) : parseYaml(text);
  } catch (err) {
    throw new Error(`${file} is not valid ${file.endsWith(".json") ? "JSON" : "YAML"}: ${(err as Error).message}`);
  }
  if (typeof doc !== "object" || doc === null) throw new Error(`${file} does not hold an OpenAPI document (an object with "openapi" and "paths").`);
  return doc as OpenApiDocument;
}

interface ArgumentPlace {
  in: "path" | "query" | "header" | "cookie" | "body" | "bodyProperty";
  /** The name on the wire (parameter name or body property). */
  wireName: string;
  style?: string;
  explode?: boolean;
}

/** The tools of every operation in an OpenAPI 3.0/3.1 document (given as an object or a JSON/YAML file path). */
export function openApiTools(source: OpenApiDocument | string, options: OpenApiToolsOptions = {}): Tool<Record<string, unknown>>[] {
  const doc = typeof source === "string" ? loadOpenApiDocument(source) : source;
  const version = String(doc.openapi ?? "");
  if (!/^3\.[01]\./.test(version)) {
    const found = doc.swagger ? `Swagger ${doc.swagger}` : doc.openapi ? `OpenAPI ${doc.openapi}` : "no \"openapi\" version field";
    throw new Error(`only OpenAPI 3.0 and 3.1 documents are supported, found ${found}. Convert the document to OpenAPI 3 first.`);
  }
  const baseUrl = (options.baseUrl ?? firstServerUrl(doc))?.replace(/\/+$/, "");
  if (!baseUrl) throw new Error("no base URL: pass `baseUrl`, or give the document an absolute `servers[0].url`.");
  const resolver = new RefResolver(doc, version.startsWith("3.0"));
  const usedNames = new Set<string>();
  const tools: Tool<Record<string, unknown>>[] = [];

  for (const [path, rawItem] of Object.entries<any>(doc.paths ?? {})) {
    const item = resolver.deref(rawItem) ?? {};
    for (const method of METHODS) {
      const op = item[method];
      if (!op) continue;
      const name = uniqueName(toolName(op.operationId, method, path), usedNames);
      const tags: string[] = Array.isArray(op.tags) ? op.tags : [];
      if (options.include && !options.include({ name, method: method.toUpperCase(), path, tags })) continue;
      tools.push(operationTool(resolver, { name, method, path, op, pathParams: item.parameters ?? [] }, baseUrl, options));
    }
  }
  return tools;
}

function firstServerUrl(doc: OpenApiDocument): string | undefined {
  const url = doc.servers?.[0]?.url;
  return typeof url === "string" && /^https?:\/\//.test(url) ? url : undefined;
}

function toolName(operationId: unknown, method: string, path: string): string {
  const raw = typeof operationId === "string" && operationId.trim() ? operationId : `${method}_${path}`;
  const clean = raw.replace(/[{}]/g, "").replace(/[^A-Za-z0-9_-]+/g, "_").replace(/^_+|_+$/g, "").replace(/_+/g, "_");
  return (clean || method).slice(0, 64);
}

function uniqueName(name: string, used: Set<string>): string {
  let candidate = name;
  for (let i = 2; used.has(candidate); i++) candidate = `${name.slice(0, 60)}_${i}`;
  used.add(candidate);
  return candidate;
}

function operationTool(
  resolver: RefResolver,
  def: { name: string; method: string; path: string; op: any; pathParams: any[] },
  baseUrl: string,
  options: OpenApiToolsOptions,
): Tool<Record<string, unknown>> {
  const { name, method, path, op } = def;
  const properties: Record<string, JsonSchema> = {};
  const required: string[] = [];
  const places = new Map<string, ArgumentPlace>();

  // Operation-level parameters override path-level ones with the same name and location.
  const params = new Map<string, any>();
  for (const raw of [...def.pathParams, ...(op.parameters ?? [])]) {
    const p = resolver.deref(raw);
    if (p?.name && p.in) params.set(`${p.in}:${p.name}`, p);
  }
  for (const p of params.values()) {
    if (!["path", "query", "header", "cookie"].includes(p.in)) continue;
    let argName: string = p.name;
    if (places.has(argName)) argName = `${p.in}_${p.name}`;
    const schema: JsonSchema = p.schema ? resolver.schema(p.schema) : contentSchema(resolver, p.content) ?? { type: "string" };
    if (p.description && !schema.description) schema.description = p.description;
    properties[argName] = schema;
    places.set(argName, { in: p.in, wireName: p.name, style: p.style, explode: p.explode });
    if (p.required || p.in === "path") required.push(argName);
  }

  const body = op.requestBody ? resolver.deref(op.requestBody) : undefined;
  const bodySchema = body ? contentSchema(resolver, body.content) : undefined;
  if (bodySchema) {
    const bodyProps = bodySchema.type === "object" && bodySchema.properties && typeof bodySchema.properties === "object" ? (bodySchema.properties as Record<string, JsonSchema>) : undefined;
    const clash = bodyProps && Object.keys(bodyProps).some((k) => places.has(k));
    if (bodyProps && !clash && !bodySchema.additionalProperties && !bodySchema.allOf && !bodySchema.oneOf && !bodySchema.anyOf) {
      for (const [k, s] of Object.entries(bodyProps)) {
        properties[k] = s;
        places.set(k, { in: "bodyProperty", wireName: k });
      }
      if (body.required) required.push(...((bodySchema.required as string[] | undefined) ?? []));
    } else {
      const argName = places.has("body") ? "request_body" : "body";
      properties[argName] = { ...bodySchema, description: (body.description as string | undefined) ?? bodySchema.description ?? "The JSON request body." };
      places.set(argName, { in: "body", wireName: argName });
      if (body.required) required.push(argName);
    }
  }

  const parameters: JsonSchema = { type: "object", properties, additionalProperties: false };
  if (required.length > 0) parameters.required = [...new Set(required)];
  const summary = [op.summary, op.description].filter((s) => typeof s === "string" && s.trim()).join(". ");
  const description = `${summary || `${method.toUpperCase()} ${path}`}`.slice(0, 1024) + ` (HTTP ${method.toUpperCase()} ${path})`;
  const requestTimeoutMs = options.requestTimeoutMs ?? 10_000;

  return {
    name,
    description,
    parameters,
    // The request's own timeout fires first, with the clearer message.
    timeoutMs: requestTimeoutMs + 2_000,
    async execute(args, ctx) {
      const request = buildRequest(baseUrl, method, path, args, places, options.headers ?? {});
      const signal = AbortSignal.any([ctx.signal, AbortSignal.timeout(requestTimeoutMs)]);
      const label = `${method.toUpperCase()} ${request.path}`;
      let response: Response;
      try {
        response = await fetch(request.url, { method: method.toUpperCase(), headers: request.headers, body: request.body, signal });
      } catch (err) {
        throw requestFailure(err, label, baseUrl, requestTimeoutMs);
      }
      let text: string;
      try {
        text = await response.text();
      } catch (err) {
        throw requestFailure(err, label, baseUrl, requestTimeoutMs);
      }
      const type = response.headers.get("content-type") ?? "";
      const excerpt = clip(text, options.errorExcerptChars ?? 500);
      if (!response.ok) {
        throw new Error(`${label} answered HTTP ${response.status} ${response.statusText}${excerpt ? `: ${excerpt}` : " with an empty body"}. Check the arguments against the tool's parameters.`);
      }
      if (/\bjson\b/i.test(type)) {
        if (text.trim() === "") return `HTTP ${response.status} (empty body)`;
        try {
          return JSON.stringify(JSON.parse(text));
        } catch {
          throw new Error(`${label} answered HTTP ${response.status} with a body that is not valid JSON although it says ${type}: ${excerpt}`);
        }
      }
      if (text === "") return `HTTP ${response.status} (empty body)`;
      if (type && !/^text\/|xml|x-www-form-urlencoded/i.test(type)) return `HTTP ${response.status}: ${text.length} characters of ${type}: ${excerpt}`;
      return text;
    },
  };
}

function buildRequest(
  baseUrl: string,
  method: string,
  pathTemplate: string,
  args: Record<string, unknown>,
  places: Map<string, ArgumentPlace>,
  fixedHeaders: Record<string, string>,
): { url: string; path: string; headers: Record<string, string>; body?: string } {
  let path = pathTemplate;
  const query = new URLSearchParams();
  const headers: Record<string, string> = { accept: "application/json, text/plain;q=0.9, */*;q=0.5", ...fixedHeaders };
  const cookies: string[] = [];
  let body: unknown;
  const bodyProps: Record<string, unknown> = {};
  let hasBodyProps = false;
  for (const [argName, value] of Object.entries(args)) {
    const place = places.get(argName);
    if (!place || value === undefined) continue;
    switch (place.in) {
      case "path":
        path = path.split(`{${place.wireName}}`).join(encodeURIComponent(scalar(value)));
        break;
      case "query":
        if (Array.isArray(value) && place.explode !== false) for (const v of value) query.append(place.wireName, scalar(v));
        else query.append(place.wireName, Array.isArray(value) ? value.map(scalar).join(",") : scalar(value));
        break;
      case "header":
        headers[place.wireName] = scalar(value);
        break;
      case "cookie":
        cookies.push(`${place.wireName}=${encodeURIComponent(scalar(value))}`);
        break;
      case "body":
        body = value;
        break;
      case "bodyProperty":
        bodyProps[place.wireName] = value;
        hasBodyProps = true;
        break;
    }
  }
  if (cookies.length > 0) headers.cookie = cookies.join("; ");
  if (hasBodyProps) body = bodyProps;
  else if (body === undefined && ["post", "put", "patch"].includes(method) && [...places.values()].some((p) => p.in === "bodyProperty")) body = {};
  const qs = query.toString();
  const fullPath = `${path}${qs ? `?${qs}` : ""}`;
  const result: { url: string; path: string; headers: Record<string, string>; body?: string } = { url: baseUrl + fullPath, path: fullPath, headers };
  if (body !== undefined) {
    headers["content-type"] = "application/json";
    result.body = JSON.stringify(body);
  }
  return result;
}

function scalar(v: unknown): string {
  return typeof v === "object" && v !== null ? JSON.stringify(v) : String(v);
}

function clip(text: string, max: number): string {
  const flat = text.replace(/\s+/g, " ").trim();
  return flat.length <= max ? flat : `${flat.slice(0, max)}... (${flat.length - max} more characters)`;
}

function requestFailure(err: unknown, label: string, baseUrl: string, timeoutMs: number): Error {
  const e = err as Error & { cause?: { code?: string; message?: string } };
  if (e.name === "TimeoutError") return new Error(`${label} got no answer within ${timeoutMs} ms; the service is slow or stuck. Try again later, or a smaller request.`);
  if (e.name === "AbortError") return new Error(`${label} was cancelled.`);
  const code = e.cause?.code;
  if (code === "ECONNREFUSED" || code === "ECONNRESET" || code === "ENOTFOUND" || code === "EHOSTUNREACH" || code === "UND_ERR_SOCKET") {
    return new Error(`cannot reach the service at ${baseUrl} (${code}); ${label} was not answered. The service may be down: try again later or use another tool.`);
  }
  return new Error(`${label} failed: ${e.cause?.message ?? e.message}`);
}

/** The JSON schema of a `content` map (application/json or any +json type first). */
function contentSchema(resolver: RefResolver, content: any): JsonSchema | undefined {
  if (!content || typeof content !== "object") return undefined;
  const key = Object.keys(content).find((k) => /^application\/json/i.test(k)) ?? Object.keys(content).find((k) => /\+json|json/i.test(k));
  const media = key ? resolver.deref(content[key]) : undefined;
  return media?.schema ? resolver.schema(media.schema) : undefined;
}

/** Resolves local `$ref`s (`#/components/...`) by inlining, and turns OpenAPI schemas into JSON Schema. */
class RefResolver {
  constructor(
    private readonly doc: OpenApiDocument,
    private readonly is30: boolean,
  ) {}

  private lookup(ref: string): any {
    if (!ref.startsWith("#/")) throw new Error(`only local $refs (starting with "#/") are supported, found "${ref}". Bundle the document into one file first.`);
    let node: any = this.doc;
    for (const raw of ref.slice(2).split("/")) {
      const key = decodeURIComponent(raw).replace(/~1/g, "/").replace(/~0/g, "~");
      node = node?.[key];
      if (node === undefined) throw new Error(`the $ref "${ref}" points at nothing in the document.`);
    }
    return node;
  }

  /** Follows `$ref`s of a non-schema object (parameter, request body, path item, media type). */
  deref(node: any, seen = new Set<string>()): any {
    if (node && typeof node === "object" && typeof node.$ref === "string") {
      if (seen.has(node.$ref)) throw new Error(`the $ref "${node.$ref}" refers to itself.`);
      seen.add(node.$ref);
      return this.deref(this.lookup(node.$ref), seen);
    }
    return node;
  }

  /** A self-contained JSON Schema: refs inlined (a recursive one is cut to an open object), OpenAPI-only keywords removed. */
  schema(node: any, stack: string[] = []): JsonSchema {
    if (node === true || node === false) return node ? {} : { not: {} };
    if (!node || typeof node !== "object") return {};
    if (typeof node.$ref === "string") {
      const ref = node.$ref as string;
      if (stack.includes(ref)) return { type: "object", description: `(recursive: same shape as ${ref.split("/").pop()})` };
      const { $ref: _ignored, ...siblings } = node;
      const target = this.schema(this.lookup(ref), [...stack, ref]);
      return Object.keys(siblings).length > 0 ? { ...target, ...this.schema(siblings, stack) } : target;
    }
    const out: JsonSchema = {};
    for (const [key, value] of Object.entries<any>(node)) {
      if (OPENAPI_ONLY.has(key) || key.startsWith("x-")) continue;
      if (key === "properties" || key === "patternProperties" || key === "$defs" || key === "definitions") {
        out[key] = Object.fromEntries(Object.entries<any>(value ?? {}).map(([k, v]) => [k, this.schema(v, stack)]));
      } else if (["items", "additionalProperties", "not", "contains", "propertyNames", "if", "then", "else", "unevaluatedProperties", "unevaluatedItems"].includes(key)) {
        out[key] = typeof value === "boolean" ? value : Array.isArray(value) ? value.map((v) => this.schema(v, stack)) : this.schema(value, stack);
      } else if (key === "allOf" || key === "anyOf" || key === "oneOf" || key === "prefixItems") {
        out[key] = (value as any[]).map((v) => this.schema(v, stack));
      } else {
        out[key] = value;
      }
    }
    if (this.is30) {
      if (typeof out.exclusiveMinimum === "boolean") {
        if (out.exclusiveMinimum && typeof out.minimum === "number") {
          out.exclusiveMinimum = out.minimum;
          delete out.minimum;
        } else delete out.exclusiveMinimum;
      }
      if (typeof out.exclusiveMaximum === "boolean") {
        if (out.exclusiveMaximum && typeof out.maximum === "number") {
          out.exclusiveMaximum = out.maximum;
          delete out.maximum;
        } else delete out.exclusiveMaximum;
      }
      if (node.nullable === true) {
        if (typeof out.type === "string") out.type = [out.type, "null"];
        if (Array.isArray(out.enum) && !out.enum.includes(null)) out.enum = [...out.enum, null];
      }
    }
    return out;
  }
}
