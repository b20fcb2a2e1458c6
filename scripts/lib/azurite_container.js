// Create a container on Azurite (the Azure Blob Storage emulator) with the
// well-known development account's shared key, which Azure documents for the
// emulator: node azurite_container.js PORT CONTAINER. Exits 0 when the
// container was made or already exists.
const crypto = require("crypto");
const http = require("http");
const [port, container] = process.argv.slice(2);
const account = "devstoreaccount1";
const key = Buffer.from("Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==", "base64");
const date = new Date().toUTCString();
const version = "2021-08-06";
const path = `/${account}/${container}`;
const toSign = ["PUT", "", "", "", "", "", "", "", "", "", "", "",
  `x-ms-date:${date}\nx-ms-version:${version}`,
  `/${account}${path}\nrestype:container`].join("\n");
const signature = crypto.createHmac("sha256", key).update(toSign, "utf8").digest("base64");
const request = http.request({
  host: "127.0.0.1", port: Number(port), method: "PUT", path: `${path}?restype=container`,
  headers: { "x-ms-date": date, "x-ms-version": version, "Content-Length": 0,
    Authorization: `SharedKey ${account}:${signature}` },
}, (response) => {
  let body = "";
  response.on("data", (chunk) => { body += chunk; });
  response.on("end", () => {
    if (response.statusCode === 201 || response.statusCode === 409) process.exit(0);
    console.error(`creating container ${container}: ${response.statusCode} ${body}`);
    process.exit(1);
  });
});
request.on("error", (error) => { console.error(error.message); process.exit(1); });
request.end();
