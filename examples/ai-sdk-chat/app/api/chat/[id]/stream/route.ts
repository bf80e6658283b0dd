import { toDres } from "../../../../dres";

// useChat's resume: the chat's live or waiting turn from its start (204: none)
export async function GET(request: Request, { params }: { params: Promise<{ id: string }> }) {
  const { id } = await params;
  return toDres(request, `/v1/chat/${encodeURIComponent(id)}/stream`);
}
