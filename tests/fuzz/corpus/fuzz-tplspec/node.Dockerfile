# a Node.js server
FROM debian:bookworm
WORKDIR /app
COPY package.json server.js /app/
RUN apt-get install -y nodejs npm && \
    npm ci
ENV PORT=3000 NODE_ENV="production"
USER node
EXPOSE 3000/tcp
CMD ["node", "server.js"]
