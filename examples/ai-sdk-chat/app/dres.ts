// The app's one way to dres: server-side, with the token, and only for this app's own page.
const DRES_URL = process.env.DRES_URL ?? "http://127.0.0.1:8000";
// The origin this app's page is served on: a request for another Host (a DNS name rebound to
// this machine) or from another Origin (another site's page or form) never reaches dres, since
// this app adds the token to what it passes on (dres's own rules: docs/security.md).
const APP_ORIGIN = new URL(process.env.APP_ORIGIN ?? "http://localhost:3000");

function refusal(request: Request): Response | null {
  const host = request.headers.get("host");
  if (host !== APP_ORIGIN.host) {
    return Response.json({ detail: `Host ${host} is not this app's (${APP_ORIGIN.host})` }, { status: 421 });
  }
  const origin = request.headers.get("origin");
  const foreign = origin !== null ? origin !== APP_ORIGIN.origin : request.headers.get("sec-fetch-site") === "cross-site";
  if (foreign) {
    return Response.json({ detail: `a request from another origin (${origin}) is refused` }, { status: 403 });
  }
  return null;
}

// Pass the page's request on to dres at `path`; dres's answer (a stream, too) is passed back as is.
export async function toDres(request: Request, path: string, init: RequestInit = {}): Promise<Response> {
  const refused = refusal(request);
  if (refused) return refused;
  const headers = new Headers(init.headers);
  if (process.env.DRES_TOKEN) headers.set("Authorization", `Bearer ${process.env.DRES_TOKEN}`);
  const reply = await fetch(`${DRES_URL}${path}`, { ...init, headers, signal: request.signal });
  return new Response(reply.body, { status: reply.status, headers: reply.headers });
}
