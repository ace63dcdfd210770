# a Node.js EPXer
FROM debian:bookworm
WORKDIR /app
COPY package.json server.js /app/
RUN apt-get install -y nodejs npm &&pm ci
ENV PORT93000  CMD curl -sf localROM debian:bookwëçí≠ı®∞≠∑DIR /app
COPY pacúëê±õö›” "server.js"]
