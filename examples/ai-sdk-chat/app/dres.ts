// Pass a request on to dres, server-side, with the token; the answer's stream is passed back as is.
const DRES_URL = process.env.DRES_URL ?? "http://127.0.0.1:8000";

export async function toDres(path: string, init: RequestInit = {}): Promise<Response> {
  const headers = new Headers(init.headers);
  if (process.env.DRES_TOKEN) headers.set("Authorization", `Bearer ${process.env.DRES_TOKEN}`);
  const reply = await fetch(`${DRES_URL}${path}`, { ...init, headers });
  return new Response(reply.body, { status: reply.status, headers: reply.headers });
}
