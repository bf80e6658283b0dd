import { toDres } from "../../../../dres";

export async function GET(_: Request, { params }: { params: Promise<{ id: string }> }) {
  const { id } = await params;
  return toDres(`/v1/chat/${encodeURIComponent(id)}/stream`);
}
