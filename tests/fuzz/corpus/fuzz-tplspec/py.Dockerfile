FROM python
ENV GREETING hello world
RUN ["pip", "install", "flask"]
CMD python3 -m http.server 8000
EXPOSE 8000
HEALTHCHECK CMD curl -sf localhost:8000
