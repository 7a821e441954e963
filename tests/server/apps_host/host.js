// A minimal MCP Apps host for the tests: the ext-apps SDK's own host side (AppBridge) and the MCP TypeScript
// SDK's client, connected to a real `hiveboard serve --http` over streamable HTTP. It does what a host does:
// lists the tools, reads the tool's ui:// resource, renders it in a sandboxed iframe under the spec's default
// Content-Security-Policy, calls the tool, and hands the view its input and result; the view's own tools/call
// requests go through the bridge to the server. Every message between bridge and view is kept in
// window.hostLog for the test to compare with tests/server/app_wire.json.
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import {
  AppBridge,
  PostMessageTransport,
  RESOURCE_MIME_TYPE,
  getToolUiResourceUri,
} from "@modelcontextprotocol/ext-apps/app-bridge";

// The spec's default CSP for a view that declares no domains (SEP-1865, "Restrictive Default"), plus the
// directives it says a sandbox must add: nothing may be fetched, so a view that needs the network fails here.
const CSP =
  "default-src 'none'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; " +
  "img-src 'self' data:; media-src 'self' data:; connect-src 'none'; frame-src 'none'; object-src 'none'; " +
  "base-uri 'self'";

window.hostLog = [];

function logged(transport, direction) {
  // record each JSON-RPC message passing between bridge and view, in both directions
  const send = transport.send.bind(transport);
  transport.send = (message, options) => {
    window.hostLog.push({ direction: "host->view", message });
    return send(message, options);
  };
  const start = transport.start.bind(transport);
  transport.start = async () => {
    const onmessage = transport.onmessage;
    transport.onmessage = (message, extra) => {
      window.hostLog.push({ direction: "view->host", message });
      return onmessage?.(message, extra);
    };
    return start();
  };
  return transport;
}

window.startHost = async function startHost({ mcpUrl, token, tool, args, frameId = "view" }) {
  const client = new Client(
    { name: "hiveboard-apps-harness", version: "1.0.0" },
    { capabilities: { extensions: { "io.modelcontextprotocol/ui": { mimeTypes: [RESOURCE_MIME_TYPE] } } } },
  );
  await client.connect(
    new StreamableHTTPClientTransport(new URL(mcpUrl), {
      requestInit: { headers: { Authorization: `Bearer ${token}` } },
    }),
  );
  const { tools } = await client.listTools();
  const found = tools.find((t) => t.name === tool);
  if (!found) throw new Error(`no tool ${tool}`);
  const uri = getToolUiResourceUri(found);
  if (!uri) throw new Error(`${tool} names no ui:// resource`);
  const read = await client.readResource({ uri });
  const content = read.contents[0];
  if (content.mimeType !== RESOURCE_MIME_TYPE) throw new Error(`${uri} is ${content.mimeType}`);
  const html = content.text.replace("<head>", `<head><meta http-equiv="Content-Security-Policy" content="${CSP}">`);

  const iframe = document.createElement("iframe");
  iframe.id = frameId;
  iframe.setAttribute("sandbox", "allow-scripts"); // an opaque origin: the view reaches nothing but its host
  iframe.style.width = "100%";
  iframe.style.height = "600px";
  document.body.appendChild(iframe);

  const bridge = new AppBridge(
    client,
    { name: "hiveboard-apps-harness", version: "1.0.0" },
    { serverTools: {}, serverResources: {} },
    { hostContext: { theme: "light", displayMode: "inline", availableDisplayModes: ["inline"] } },
  );
  bridge.onsizechange = ({ height }) => {
    if (height) iframe.style.height = `${Math.min(height, 2000)}px`;
  };
  bridge.oninitialized = async () => {
    await bridge.sendToolInput({ arguments: args });
    const result = await client.callTool({ name: tool, arguments: args });
    await bridge.sendToolResult(result);
    window.hostReady = true;
  };
  await bridge.connect(logged(new PostMessageTransport(iframe.contentWindow, iframe.contentWindow), "bridge"));
  iframe.srcdoc = html;
  window.hostBridge = bridge;
  return { uri, mimeType: content.mimeType, meta: found._meta };
};
