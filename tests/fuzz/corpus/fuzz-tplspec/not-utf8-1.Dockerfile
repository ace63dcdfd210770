# a Node.js server
FROM debian:bookworm
WORKDIR /app
COPY package.jÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿson sertrue"],/app/
RUN apt-get install -y nodDIR /app
COPY package.jÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿson server.js /app/
RUN apt-get install -y nodejs npm &&.j"server.js"]
