// The official x402 browser client, bundled by esbuild for the cross-origin test page.
import { wrapFetchWithPayment, x402Client, decodePaymentResponseHeader } from "@x402/fetch";
import { ExactEvmScheme } from "@x402/evm/exact/client";
import { privateKeyToAccount } from "viem/accounts";

window.payWithOfficialClient = async function (url, privateKey) {
  const client = new x402Client().register("eip155:*", new ExactEvmScheme(privateKeyToAccount(privateKey)));
  const response = await wrapFetchWithPayment(fetch, client)(url, { method: "GET" });
  const header = response.headers.get("PAYMENT-RESPONSE");
  return {
    status: response.status,
    body: await response.json(),
    settlement: header ? decodePaymentResponseHeader(header) : null,
  };
};
