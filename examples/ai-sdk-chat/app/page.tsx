import { redirect } from "next/navigation";

// a new chat: a new id in the URL, which is the dres conversation's id
export const dynamic = "force-dynamic";

export default function NewChat() {
  redirect(`/c/${crypto.randomUUID()}`);
}
