import { toDres } from "../../dres";

export async function POST(request: Request) {
  const body = await request.text();
  return toDres("/v1/chat", {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body,
  });
}
