// A module resolution hook used only when sinkflex runs from its TypeScript sources (a checkout): it adds
// the export condition "sinkflex-source", under which the import "sinkflex" resolves to src/index.ts
// instead of the compiled dist/index.js, so that a user module and the running command share one copy of
// every module (one env registry). The `sinkflex` command and the data-preparation workers register it;
// the installed package (dist/) never does. It changes no other resolution.
export async function resolve(specifier, context, next) {
  return next(specifier, { ...context, conditions: [...context.conditions, "sinkflex-source"] });
}
