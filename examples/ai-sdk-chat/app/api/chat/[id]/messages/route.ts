import { toDres } from "../../../../dres";

// the chat's history as UIMessages, for useChat's initial messages (404: a new chat)
export async function GET(request: Request, { params }: { params: Promise<{ id: string }> }) {
  const { id } = await params;
  return toDres(request, `/v1/chat/${encodeURIComponent(id)}/messages`);
}
