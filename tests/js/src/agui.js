// An AG-UI page on @ag-ui/client's HttpAgent against actorloop serve's POST /v1/ag-ui.
import { HttpAgent } from "@ag-ui/client";

function render(messages) {
  const list = document.getElementById("messages");
  list.replaceChildren(
    ...messages.map((message) => {
      const item = document.createElement("li");
      item.className = message.role;
      const calls = (message.toolCalls ?? []).map((c) => ` call ${c.function.name}(${c.function.arguments})`);
      item.textContent = `${message.role}: ${message.content ?? ""}${calls.join("")}`;
      return item;
    }),
  );
}

window.aguiTurn = async (threadId, text) => {
  const agent = new HttpAgent({ url: "/v1/ag-ui", threadId });
  agent.subscribe({ onMessagesChanged: ({ messages }) => render(messages) });
  agent.addMessage({ id: "u1", role: "user", content: text });
  const { result } = await agent.runAgent({ runId: "client-run" });
  render(agent.messages);
  return { result: result ?? null, messages: agent.messages };
};

window.aguiStart = (threadId, text) => {
  window.agent = new HttpAgent({ url: "/v1/ag-ui", threadId });
  window.agent.addMessage({ id: "u1", role: "user", content: text });
  window.running = window.agent.runAgent({ runId: "client-run" }).then(
    () => "finished",
    (error) => `failed: ${error}`,
  );
};

window.aguiAbort = async () => {
  window.agent.abortRun();
  return await window.running;
};
