// A chat page on the `ai` package's own chat machinery (AbstractChat, what useChat wraps)
// and its DefaultChatTransport, against actorloop serve's UI message stream routes.
import { AbstractChat, DefaultChatTransport } from "ai";

class PageState {
  constructor(render) {
    this.status = "ready";
    this.error = undefined;
    this.messages = [];
    this.render = render;
  }
  pushMessage(message) {
    this.messages = [...this.messages, message];
    this.render(this.messages);
  }
  popMessage() {
    this.messages = this.messages.slice(0, -1);
    this.render(this.messages);
  }
  replaceMessage(index, message) {
    this.messages = this.messages.map((m, i) => (i === index ? this.snapshot(message) : m));
    this.render(this.messages);
  }
  snapshot(thing) {
    return structuredClone(thing);
  }
}

class PageChat extends AbstractChat {}

function partText(part) {
  if (part.type === "text" || part.type === "reasoning") return `${part.type}: ${part.text}`;
  if (part.type === "dynamic-tool")
    return `tool ${part.toolName} [${part.state}] ${JSON.stringify(part.input)} -> ${JSON.stringify(part.output ?? part.errorText ?? null)}`;
  return part.type;
}

function render(messages) {
  const list = document.getElementById("messages");
  list.replaceChildren(
    ...messages.map((message) => {
      const item = document.createElement("li");
      item.className = message.role;
      item.textContent = `${message.role}: ` + message.parts.map(partText).join(" | ");
      return item;
    }),
  );
}

function chatFor(sessionId, body = {}) {
  const api = `/v1/sessions/${encodeURIComponent(sessionId)}/chat`;
  return new PageChat({
    id: sessionId,
    state: new PageState(render),
    transport: new DefaultChatTransport({
      api,
      body,
      prepareReconnectToStreamRequest: () => ({ api: `${api}/stream` }),
    }),
    onError: (error) => {
      document.body.dataset.error = String(error);
    },
  });
}

window.chatTurn = async (sessionId, text) => {
  const chat = chatFor(sessionId);
  await chat.sendMessage({ text });
  document.body.dataset.status = chat.status;
  return { status: chat.status, messages: chat.messages };
};

window.chatStart = (sessionId, text) => {
  window.chat = chatFor(sessionId);
  window.pending = window.chat.sendMessage({ text });
};

window.chatStop = async () => {
  await window.chat.stop();
  await window.pending;
  return { status: window.chat.status, messages: window.chat.messages };
};

window.chatResume = async (sessionId) => {
  const chat = chatFor(sessionId);
  await chat.resumeStream();
  return { status: chat.status, messages: chat.messages };
};
