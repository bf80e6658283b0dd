import { toDres } from "../../dres";

// useChat's messages: a new turn, a regenerate or an edit (a fork), an approval's answer
export async function POST(request: Request) {
  const body = await request.text();
  return toDres(request, "/v1/chat", { method: "POST", headers: { "Content-Type": "application/json" }, body });
}
